"""Bundles: versioning that never overwrites, opaque ids, private key, display images, loading errors."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import CIFAR_CLASSES, WEB_SOURCE, fake_mnist_test, make_run, make_sweep
from PIL import Image

from controversial.study.bundle import BundleError, load_bundle
from controversial.study.display import display_png
from controversial.study.export import ExportOptions, export_study

from .conftest import SMALL


def _digest(folder):
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def test_new_versions_never_touch_old_ones(tmp_path):
    sweep = make_sweep(tmp_path / "sweep")
    settings = ExportOptions(name="pilot", **SMALL)
    first = export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, WEB_SOURCE)
    before = _digest(first)
    second = export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, WEB_SOURCE)
    assert (first.name, second.name) == ("v1", "v2")
    assert _digest(first) == before
    assert not [p for p in (tmp_path / "studies" / "pilot").iterdir() if p.name.startswith(".")]  # no staging left
    assert load_bundle(second).label == "pilot/v2"


def test_bundle_contents_and_private_key(small_bundle):
    bundle = load_bundle(small_bundle)
    kinds = [t.kind for t in bundle.trials]
    assert (kinds.count("stimulus"), kinds.count("attention"), kinds.count("demo")) == (33, 2, 1)
    assert sum(t.image_repetition for t in bundle.trials) == 3
    assert all(re.fullmatch(r"[0-9a-f]{12}", sid) for sid in bundle.key)
    images = sorted(p.name for p in (small_bundle / "images").iterdir())
    assert all(re.fullmatch(r"[0-9a-f]{12}\.png", name) for name in images)
    trials_text = (small_bundle / "trials.csv").read_text()
    assert not re.search(r"abs|vgg|kde|natural|controversial|MNIST", trials_text)
    key = list(csv.DictReader(io.StringIO((small_bundle / "key.csv").read_text())))
    assert sum(r["kind"] == "controversial" for r in key) == 20
    assert {r["image"] for r in key if r["kind"] == "natural"} == {
        r["image"]
        for r in key
        if r["kind"] == "natural" and re.fullmatch(rf"MNIST_\d+_{r['true_class']}\.png", r["image"])
    }
    spec = json.loads((small_bundle / "study.json").read_text())
    assert spec["categories"] == [str(d) for d in range(10)] and spec["provenance"]["counts"]["repeats"] == 3
    assert (small_bundle / "web" / "index.html").is_file()
    originals = {p.name for p in (small_bundle / "stimuli").iterdir()}
    assert originals == {r["image"] for r in key if r["kind"] in ("controversial", "natural")}
    synthetic = next(r for r in key if r["kind"] == "controversial")
    assert (small_bundle / "stimuli" / synthetic["image"]).read_bytes() == Path(synthetic["origin"]).read_bytes()
    with Image.open(small_bundle / "images" / images[0]) as picture:
        assert picture.size == (56, 56)


def test_cifar_study_keeps_colour_and_is_not_inverted(tmp_path):
    """CIFAR-10: colour display images, class names in natural-image names, no inversion."""
    make_run(tmp_path / "sweep" / "jem_vs_vgg", "jem", "vgg", np.random.default_rng(0), dataset="cifar10")
    bundle = load_bundle(
        export_study(
            tmp_path / "sweep",
            tmp_path / "studies",
            ExportOptions(name="cifar", **{**SMALL, "display": {"size": 64}}),
            fake_mnist_test,
            WEB_SOURCE,
        )
    )
    assert bundle.spec.categories == CIFAR_CLASSES
    natural = next(e for e in bundle.key.values() if e.kind == "natural")
    assert re.fullmatch(rf"CIFAR10_(\d+)_{natural.true_class}\.png", natural.image)
    index = int(natural.image.split("_")[1])
    original = fake_mnist_test("cifar10")[0][index].transpose(1, 2, 0)
    assert np.array_equal(np.asarray(Image.open(bundle.root / "stimuli" / natural.image)), original)
    shown = np.asarray(Image.open(bundle.image_path(natural.stimulus_id)))
    assert shown.shape == (64, 64, 3)
    correlation = np.corrcoef(shown[::2, ::2].ravel(), original.ravel())[0, 1]
    assert correlation > 0.5  # upsampled, not inverted (inversion would make it negative)


def test_mnist_display_is_inverted_and_upsampled():
    digit = np.zeros((28, 28), dtype=np.uint8)
    digit[10:18, 12:16] = 255
    shown = np.asarray(Image.open(io.BytesIO(display_png(digit, 56, "nearest", invert=True))))
    assert shown.shape == (56, 56)
    assert shown[0, 0] == 255 and shown[28, 28] == 0  # light background, dark stroke
    assert np.array_equal(shown[::2, ::2], 255 - digit)
    colour = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert np.asarray(Image.open(io.BytesIO(display_png(colour, 64, "nearest")))).shape == (64, 64, 3)
    with pytest.raises(ValueError, match="unknown resample 'blur'"):
        display_png(digit, 56, "blur")


def test_loading_something_that_is_not_a_bundle_fails_clearly(tmp_path, small_bundle):
    with pytest.raises(BundleError, match="named v<k>"):
        load_bundle(tmp_path)
    (tmp_path / "v1").mkdir()
    with pytest.raises(BundleError, match="study.json: missing"):
        load_bundle(tmp_path / "v1")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n_repeats": -1}, "n_repeats\n  Input should be greater than or equal to 0"),
        ({"display": {"size": 0}}, "display.size"),
        ({"attention_prompt": "pick cat"}, "must contain {category}"),
    ],
)
def test_bad_export_settings_are_refused(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ExportOptions(name="x", **{**SMALL, **change})


def test_bad_study_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="name\n  String should match pattern"):
        export_study(
            make_sweep(tmp_path / "sweep"),
            tmp_path / "studies",
            ExportOptions(name="../x", **SMALL),
            fake_mnist_test,
            WEB_SOURCE,
        )


def test_a_version_claimed_after_the_listing_is_skipped(tmp_path, monkeypatch):
    """Another export renamed its bundle to v1 between this export's listing and its rename."""
    import controversial.study.bundle as bundle_module

    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    settings = ExportOptions(name="race", **SMALL)
    first = export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, WEB_SOURCE)
    listings = iter([[]])  # the first listing is stale: it misses v1
    real = bundle_module.existing_versions

    def listing(root):
        stale = next(listings, None)
        return real(root) if stale is None else stale

    monkeypatch.setattr(bundle_module, "existing_versions", listing)
    second = export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, WEB_SOURCE)
    assert next(listings, "consumed") == "consumed"  # the stale listing was used
    assert (first.name, second.name) == ("v1", "v2")
    assert load_bundle(second).trials and load_bundle(first).trials  # both complete


def test_a_file_in_the_way_of_the_next_version_is_refused(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    (tmp_path / "studies" / "race").mkdir(parents=True)
    (tmp_path / "studies" / "race" / "v1").write_text("not a bundle")
    with pytest.raises(BundleError, match="v1 exists but is not a bundle folder"):
        export_study(sweep, tmp_path / "studies", ExportOptions(name="race", **SMALL), fake_mnist_test, WEB_SOURCE)
    assert not list((tmp_path / "studies" / "race").glob(".staging-*"))  # nothing half-written is left


def test_concurrent_exports_get_distinct_versions(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    settings = ExportOptions(name="race", **SMALL)
    with ThreadPoolExecutor(3) as pool:
        paths = list(
            pool.map(
                lambda _: export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, WEB_SOURCE), range(3)
            )
        )
    assert sorted(p.name for p in paths) == ["v1", "v2", "v3"]
    assert len({next(iter(load_bundle(p).key)) for p in paths}) == 3  # three distinct, complete bundles
