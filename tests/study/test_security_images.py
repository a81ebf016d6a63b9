"""Issue 51 item 6: attention checks were recognisable by their bytes and their positions.

Padding every image to one file length left the IDAT length (746 bytes for a check against about 2,900 for a
stimulus) and the padding chunk's length to tell them apart; the checks also sat at evenly spaced positions.
"""

from __future__ import annotations

import base64
import io
import random
import zlib

import numpy as np
import pytest
from PIL import Image

from controversial.records.study import TrialSpec
from controversial.study.bundle import load_bundle
from controversial.study.display import attention_png, display_png, png_chunks, uniform_pngs
from controversial.study.order import participant_order

CHROMIUM = "/usr/bin/chromium"  # Debian's, as in test_browser_e2e.py
DECODE_ALL = """async () => {
  const out = {};
  for (const img of document.images) {
    await img.decode();
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const context = canvas.getContext('2d');
    context.drawImage(img, 0, 0);
    out[img.id] = Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data);
  }
  return out;
}"""


def _layout(data: bytes) -> list[tuple[bytes, int]]:
    return [(kind, len(body)) for kind, body in png_chunks(data)]


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def test_a_check_and_a_stimulus_have_the_same_byte_structure(small_bundle):
    bundle = load_bundle(small_bundle)
    kinds = {entry.stimulus_id: entry.kind for entry in bundle.key.values()}
    served = {sid: bundle.image_path(sid).read_bytes() for sid in kinds}
    check = next(sid for sid, kind in kinds.items() if kind == "attention")
    layouts = {kind: {tuple(_layout(served[sid])) for sid in served if kinds[sid] == kind} for kind in kinds.values()}
    assert set(layouts) == {"controversial", "natural", "attention", "demo"}
    assert len(set().union(*layouts.values())) == 1, layouts  # chunk types and lengths, every image alike
    assert [kind for kind, _ in _layout(served[check])] == [b"IHDR", b"IDAT", b"IEND"]
    assert len({len(data) for data in served.values()}) == 1


def test_re_encoding_keeps_every_pixel_and_a_strict_inflater_reads_the_padding():
    rng = np.random.default_rng(0)
    images = {
        "noise": display_png(rng.integers(0, 256, (28, 28), dtype=np.uint8), 112, invert=True),
        "digit": display_png(np.pad(np.full((8, 8), 255, np.uint8), 10), 112, invert=True),
        "check": attention_png('select 100% for "7"', 112),
    }
    uniform = uniform_pngs(images)
    assert len({tuple(_layout(data)) for data in uniform.values()}) == 1
    for name, data in images.items():
        assert np.array_equal(_pixels(uniform[name]), _pixels(data)), name
        (idat,) = [body for kind, body in png_chunks(uniform[name]) if kind == b"IDAT"]
        inflater = zlib.decompressobj()
        assert inflater.decompress(idat) == zlib.decompress(b"".join(b for k, b in png_chunks(data) if k == b"IDAT"))
        assert inflater.eof and inflater.unused_data == b""  # the stream ends exactly at the chunk's end


def test_colour_and_grey_images_in_one_bundle_are_refused():
    grey = display_png(np.zeros((4, 4), np.uint8), 16)
    colour = display_png(np.zeros((4, 4, 3), np.uint8), 16)
    with pytest.raises(ValueError, match="'b' differs .* PNG header"):
        uniform_pngs({"a": grey, "b": colour})


def test_check_positions_cover_their_whole_band_not_a_spot_near_even_spacing():
    trials = [TrialSpec(f"s{i}", "stimulus", 0) for i in range(160)]
    trials += [TrialSpec(f"s{i}", "stimulus", 1) for i in range(42)]
    trials += [TrialSpec(f"a{i}", "attention", 0) for i in range(4)]
    seen: list[set[int]] = [set() for _ in range(4)]
    for seed in range(400):
        order = participant_order(trials, random.Random(seed))
        for band, position in enumerate(i for i, t in enumerate(order) if t.kind == "attention"):
            seen[band].add(position)
    band = len(trials) / 4  # 206 trials, 4 checks: 51.5 positions per band
    for k, positions in enumerate(seen):
        assert min(positions) >= max(1, int(k * band)) and max(positions) < (k + 1) * band
        assert len(positions) >= 0.9 * band - 1, f"check {k} took {len(positions)} of about {band:.0f} places"


@pytest.mark.browser
def test_chromium_decodes_every_re_encoded_image_to_the_same_pixels(small_bundle):
    """Browsers do not all inflate with zlib: the padded deflate stream must decode in the one participants use."""
    from playwright.sync_api import sync_playwright

    bundle = load_bundle(small_bundle)
    served = {sid: bundle.image_path(sid).read_bytes() for sid in bundle.key}
    urls = {sid: "data:image/png;base64," + base64.b64encode(data).decode() for sid, data in served.items()}
    page_html = "".join(f'<img id="i{sid}" src="{url}">' for sid, url in urls.items())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.set_content(page_html)
        decoded = page.evaluate(DECODE_ALL)
        browser.close()
    assert len(decoded) == len(served)
    for sid, data in served.items():
        expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGBA")).ravel().tolist()
        assert decoded[f"i{sid}"] == expected, f"{bundle.key[sid].kind} image {sid} decodes differently in Chromium"
