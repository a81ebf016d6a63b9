"""Issue 58 items 5 and 6: attention checks found without looking at a pixel, and repeats visible by id.

The attack rendered each category's check with the project's own ``attention_png``, compressed it as the
bundle does, and found the served image whose bytes began the same way (4 of 4, no false hit); the checks'
ids were the same for every participant, and a repeat had the same id and URL as its first showing.
"""

from __future__ import annotations

import io
import random
import sqlite3
import zlib

import numpy as np
import pytest
from PIL import Image

from controversial.study.bundle import load_bundle
from controversial.study.db import make_engine
from controversial.study.display import attention_png, fit_png, png_chunks, png_layout, uniform_pngs
from controversial.study.presentations import stimuli_shown
from controversial.study.scripted_participants import prolific_like_id, served_checks

from .production_app import answer, arrive

PREFIX = 32  # bytes of compressed data a match must share (a real one shares hundreds)


def _idat(data: bytes) -> bytes:
    return b"".join(body for kind, body in png_chunks(data) if kind == b"IDAT")


def _ink(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("L")) < 128


def _templates(bundle) -> list[tuple[bytes, np.ndarray]]:
    """What a script makes of the project's own code: every category's check rendered as the export does, encoded
    as the bundle encodes it (the compressed bytes), and its ink."""
    spec = bundle.spec
    rendered = {c: attention_png(spec.attention_prompt.format(category=c), spec.display_size) for c in spec.categories}
    encoded = uniform_pngs(rendered)
    return [(_idat(encoded[c])[:PREFIX], _ink(rendered[c])) for c in spec.categories]


def _flagged(data: bytes, templates: list[tuple[bytes, np.ndarray]]) -> bool:
    """The two detectors: the served bytes begin like a rendering, or its ink covers the same pixels (IoU)."""
    idat, ink = _idat(data), _ink(data)
    for prefix, template_ink in templates:
        overlap = (ink & template_ink).sum() / max(1, (ink | template_ink).sum())
        if idat.startswith(prefix) or overlap >= 0.5:
            return True
    return False


def test_5_detectors_built_from_the_projects_rendering_do_no_better_than_chance(client, app, small_bundle):
    bundle = load_bundle(small_bundle)
    templates = _templates(bundle)
    assert _flagged((small_bundle / "images" / f"{_a_check(bundle)}.png").read_bytes(), templates)  # they work
    rng = random.Random(50)
    hits = false_alarms = checks = stimuli = 0
    for _ in range(6):
        state = arrive(client, prolific_like_id(rng), prolific_like_id(rng)).json()
        served = [t["stimulus_id"] for t in state["trials"]]
        truth = served_checks(app.state.engine, bundle, served)
        for trial in state["trials"]:
            flagged = _flagged(client.get(trial["image_url"]).content, templates)
            if trial["stimulus_id"] in truth:
                checks, hits = checks + 1, hits + flagged
            else:
                stimuli, false_alarms = stimuli + 1, false_alarms + flagged
    assert checks == 12 and stimuli == 6 * 33
    assert hits / checks <= false_alarms / stimuli == 0  # flags nothing: a check is as likely as any image


def _a_check(bundle) -> str:
    return next(e.stimulus_id for e in bundle.key.values() if e.kind == "attention")


def test_5_checks_have_ids_and_pixels_of_their_own_for_every_participant(client, app, small_bundle):
    bundle = load_bundle(small_bundle)
    rng = random.Random(51)
    seen_ids: list[set[str]] = []
    check_images: list[bytes] = []
    lengths = set()
    for _ in range(3):
        state = arrive(client, prolific_like_id(rng), prolific_like_id(rng)).json()
        served = [t["stimulus_id"] for t in state["trials"]]
        seen_ids.append(set(served))
        for trial in state["trials"]:
            data = client.get(trial["image_url"]).content
            lengths.add(len(data))
            if trial["stimulus_id"] in served_checks(app.state.engine, bundle, served):
                check_images.append(data)
                assert client.get(trial["image_url"]).content == data  # a reload shows the same drawing
    assert not (seen_ids[0] & seen_ids[1]) and not (seen_ids[1] & seen_ids[2])
    assert not {t.stimulus_id for t in bundle.trials} & set().union(*seen_ids)  # the bundle's ids stay private
    assert len(check_images) == 6 and len(set(check_images)) == 6
    assert len(lengths) == 1  # every served image, each check drawing included, has the bundle's one length


def test_6_a_repeat_has_its_own_id_and_url_and_is_stored_under_its_stimulus(client, app):
    state = arrive(client, prolific_like_id(random.Random(60)), prolific_like_id(random.Random(61))).json()
    token = state["token"]
    client.post(f"/api/sessions/{token}/consent", json={"consent": True})
    shown = stimuli_shown(app.state.engine, [t["stimulus_id"] for t in state["trials"]])
    by_stimulus: dict[str, list[dict]] = {}
    for trial in state["trials"]:
        by_stimulus.setdefault(shown[trial["stimulus_id"]], []).append(trial)
    repeated = [trials for trials in by_stimulus.values() if len(trials) == 2]
    assert len(repeated) == 3 and len({t["stimulus_id"] for t in state["trials"]}) == 35
    first, again = repeated[0]
    assert first["stimulus_id"] != again["stimulus_id"] and first["image_url"] != again["image_url"]
    assert client.get(first["image_url"]).content == client.get(again["image_url"]).content  # the same picture
    wrong = answer(client, token, {**again, "stimulus_id": first["stimulus_id"]})  # the first id for the repeat
    assert wrong.status_code == 422 and "not the image shown at position" in wrong.json()["detail"]
    assert answer(client, token, first).status_code == 201 and answer(client, token, again).status_code == 201
    with app.state.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT stimulus_id, image_repetition FROM responses ORDER BY id").all()
    assert [tuple(r) for r in rows] == [(shown[first["stimulus_id"]], 0), (shown[first["stimulus_id"]], 1)]


def test_a_database_from_before_presentations_is_refused(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE participants (id INTEGER PRIMARY KEY)")
    with pytest.raises(RuntimeError, match="lacks table.*presentations.*older version"):
        make_engine(f"sqlite:///{path}")


def test_a_rendering_that_does_not_fit_the_layout_is_reported():
    noise = np.random.default_rng(0).integers(0, 256, (56, 56), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, format="PNG")
    blank = io.BytesIO()
    Image.new("L", (56, 56), 255).save(blank, format="PNG")
    header, length = png_layout(uniform_pngs({"blank": blank.getvalue()})["blank"])
    assert fit_png(buffer.getvalue(), header, length) is None
    fitted = fit_png(blank.getvalue(), header, length + 40)
    assert fitted is not None and len(_idat(fitted)) == length + 40
    assert zlib.decompress(_idat(fitted)) == zlib.decompress(_idat(uniform_pngs({"b": blank.getvalue()})["b"]))


def test_5_a_check_is_drawn_in_one_of_several_bundled_fonts_and_differs_by_seed():
    from controversial.study.attention import check_fonts, varied_check_png

    assert None in check_fonts() and len(check_fonts()) >= 2  # Pillow's own, and matplotlib's faces
    drawings = {varied_check_png("Attention check: pick 7", 56, False, seed) for seed in range(8)}
    assert len(drawings) == 8
