"""Attention checks drawn afresh for each participant, so that no script can reproduce what it will be served.

A check drawn once per bundle (``display.attention_png``) was found without looking at a pixel: a script
rendered each category's check with that function and Pillow's bundled font, compressed it, and found the
served image whose bytes began the same way (4 of 4, no false hit); and the check's id was the same for every
participant, so one participant's note served every bot. Here each presentation of a check is drawn from a
secret seed the server keeps (``db.Presentation.seed``, never sent): a font among the ones bundled with the
project's dependencies (Pillow's own and matplotlib's DejaVu and STIX faces), a font size, a place, a slant,
paper and ink shades and speckle noise. The rendering code is public; the seed is not, so neither the bytes
nor the pixels of a served check can be predicted from it (``tests/study/test_security_presentations.py``
runs detectors built from this code against served bytes). A script that decodes the image and reads or
recognises the text still finds it: that is reading pixels, the defence the threat model relies on.

Every rendering is re-encoded to the bundle's one layout (``display.fit_png``); the export pads the bundle's
images to leave room for them (``check_room``).
"""

from __future__ import annotations

import importlib.util
import io
import random
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from controversial.study.display import png_layout, uniform_pngs, wrap_text

# matplotlib's bundled text faces (a dependency of the project), beside Pillow's own (None)
_FACES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
)
SAMPLES_PER_PROMPT = 24  # renderings per check the export measures to size the bundle's padding
ROOM_MARGIN = 1.15  # and this much more, since the server's own draws may compress a little worse


@lru_cache(maxsize=1)
def check_fonts() -> tuple[str | None, ...]:
    """The font files a check may be drawn in (None: Pillow's bundled font), found without importing matplotlib."""
    spec = importlib.util.find_spec("matplotlib")
    folders = [Path(p) / "mpl-data" / "fonts" / "ttf" for p in (spec.submodule_search_locations or [])] if spec else []
    found = [str(folder / name) for folder in folders for name in _FACES if (folder / name).is_file()]
    return (None, *found)


@lru_cache(maxsize=256)
def _font(path: str | None, size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size) if path is None else ImageFont.truetype(path, size)


def varied_check_png(instruction: str, size: int, colour: bool, seed: int, noise: float = 1.0) -> bytes:
    """The check as the presentation with ``seed`` shows it: ``instruction`` in a font, size, place and slant
    drawn from ``seed``, on paper with speckles (``noise`` scales their number; 0: none)."""
    rng = random.Random(seed)
    path = rng.choice(check_fonts())
    margin = rng.randint(max(2, size // 40), max(4, size // 12))
    room = size - 2 * margin
    largest = 8
    for font_size in range(max(10, size // 9), 7, -1):  # the largest font whose wrapped text fits
        lines = wrap_text(instruction, _font(path, font_size), room)
        if len(lines) * int(font_size * 1.3) <= room * 0.8:
            largest = font_size
            break
    font = _font(path, rng.randint(max(8, round(largest * 0.75)), largest))
    line_height = int(font.size * 1.3) if isinstance(font, ImageFont.FreeTypeFont) else 12
    lines = wrap_text(instruction, font, room)
    width = int(max(font.getlength(line) for line in lines))
    height = len(lines) * line_height
    x = rng.randint(margin, max(margin, size - margin - width))
    y = rng.randint(margin, max(margin, size - margin - height))
    mask = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(mask)
    for k, line in enumerate(lines):
        draw.text((x, y + k * line_height), line, fill=255, font=font)
    mask = mask.rotate(
        rng.uniform(-4.0, 4.0), resample=Image.Resampling.BICUBIC, center=(x + width / 2, y + height / 2)
    )
    channels = 3 if colour else 1
    paper = [rng.randint(226, 255) for _ in range(channels)]
    ink = [rng.randint(0, 70) for _ in range(channels)]
    pixels = np.empty((size, size, channels), dtype=np.float32)
    pixels[:] = paper
    alpha = np.asarray(mask, dtype=np.float32)[..., None] / 255.0
    pixels = pixels * (1 - alpha) + np.asarray(ink, dtype=np.float32) * alpha
    speckles = np.random.default_rng(rng.getrandbits(64))
    count = int(noise * rng.uniform(0.001, 0.004) * size * size)
    rows, cols = speckles.integers(0, size, count), speckles.integers(0, size, count)
    pixels[rows, cols] = speckles.integers(0, 256, (count, channels))
    array = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    picture = Image.fromarray(array if colour else array[..., 0])
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


def check_room(instructions: Sequence[str], size: int, colour: bool, seed: int) -> int:
    """The IDAT length a bundle's images are padded to at least, so that the server's renderings of these
    checks fit (``display.fit_png``): the longest of a sample of renderings, with a margin."""
    rng = random.Random(seed)
    samples = {
        f"{n}-{k}": varied_check_png(text, size, colour, rng.getrandbits(62))
        for n, text in enumerate(dict.fromkeys(instructions))
        for k in range(SAMPLES_PER_PROMPT)
    }
    if not samples:
        return 0
    _, longest = png_layout(next(iter(uniform_pngs(samples).values())))
    return int(longest * ROOM_MARGIN)
