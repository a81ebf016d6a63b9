import dataclasses

import numpy as np
import pytest

from controversial.records.manifest import MANIFEST_COLUMNS, ManifestRow, read_manifest, write_manifest
from controversial.records.names import stimulus_filename
from controversial.synthesis.stimuli import load_png, save_png


def _row(**overrides) -> ManifestRow:
    values = dict(
        dataset="mnist",
        model_a="abs",
        model_b="vgg",
        class_a=3,
        class_b=7,
        class_a_name="3",
        class_b_name="7",
        seed=0,
        source="synthetic",
        init="noise",
        steps=120,
        converged=False,
        hard_score=0.91,
        smooth_score=2.5,
        p_model_a_class_a=0.95,
        p_model_a_class_b=0.02,
        p_model_b_class_a=0.04,
        p_model_b_class_b=0.93,
        accepted=True,
        status="accepted",
        image_file="abs_3_vs_vgg_7_seed0.png",
        wall_time_s=0.5,
    )
    values.update(overrides)
    return ManifestRow(**values)


def test_filename_follows_the_published_scheme():
    assert stimulus_filename("abs", "3", "vgg", "7", 2) == "abs_3_vs_vgg_7_seed2.png"


def test_manifest_round_trip_preserves_types_and_nan(tmp_path):
    rows = [
        _row(),
        _row(class_a=1, accepted=False, status="failed: non-finite score", image_file="", hard_score=float("nan")),
    ]
    path = tmp_path / "manifest.csv"
    write_manifest(path, rows)
    back = read_manifest(path)
    assert back[0] == rows[0]
    assert back[1].accepted is False and np.isnan(back[1].hard_score)
    assert path.read_text().splitlines()[0].split(",") == list(MANIFEST_COLUMNS)
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


def test_manifest_errors_name_file_row_and_column(tmp_path):
    path = tmp_path / "manifest.csv"
    write_manifest(path, [_row(), _row()])
    text = path.read_text().splitlines()
    text[2] = text[2].replace(",true,accepted,", ",maybe,accepted,")
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"manifest.csv, row 3, column 'accepted'"):
        read_manifest(path)
    path.write_text("dataset,model_a\nmnist,abs\n")
    with pytest.raises(ValueError, match="missing manifest column"):
        read_manifest(path)


def test_png_round_trip_is_exact_for_8bit_images(tmp_path):
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, size=(1, 28, 28)) / 255.0
    colour = rng.integers(0, 256, size=(3, 32, 32)) / 255.0
    save_png(tmp_path / "g.png", grey)
    save_png(tmp_path / "c.png", colour)
    assert np.array_equal(np.rint(load_png(tmp_path / "g.png") * 255), np.rint(grey * 255))
    assert load_png(tmp_path / "c.png").shape == (3, 32, 32)
    assert np.array_equal(np.rint(load_png(tmp_path / "c.png") * 255), np.rint(colour * 255))


def test_rows_are_immutable_records():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _row().accepted = False
