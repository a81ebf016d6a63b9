"""A study bundle records how its images are stored and shown, and evaluate.py reads that record instead of
guessing; an ``invert=`` that contradicts it is an error; an implausibly low natural-image accuracy warns."""

from __future__ import annotations

import json

import pytest
from helpers import run_task

from controversial.study.bundle import load_bundle, recorded_inversion
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch


def _checkpoint(folder, accuracy: float):
    kwargs = {"image_shape": [1, 28, 28], "hidden": 8, "seed": 1}
    info = CheckpointInfo(
        name="tiny",
        arch="tiny_mlp",
        arch_kwargs=kwargs,
        dataset="mnist",
        calibration=Calibration(1.0, 0.0, "identity"),
        metrics={"test_accuracy": accuracy},
    )
    save_checkpoint(folder / "tiny.pt", create_arch("tiny_mlp", **kwargs), info)
    return folder / "tiny.pt"


def test_the_bundle_records_its_display_convention(small_bundle):
    spec = load_bundle(small_bundle).spec
    assert spec.stimuli_invert is False and spec.display_inverted is True  # MNIST shown dark on light
    assert json.loads((small_bundle / "study.json").read_text())["stimuli_invert"] is False
    assert recorded_inversion(small_bundle / "stimuli") is False
    assert recorded_inversion(small_bundle / "images") is None


def test_evaluate_reads_the_bundle_and_refuses_a_contradiction(small_bundle, tmp_path, capsys, caplog):
    model = _checkpoint(tmp_path, accuracy=0.99)
    stimuli = small_bundle / "stimuli"
    with caplog.at_level("WARNING"):
        run_task("evaluate", [f"models=[{model}]", f"images={stimuli}"], tmp_path / "run")
    out = capsys.readouterr().out
    assert "stimuli/ stored as the models see them (study.json), used as stored" in out
    assert "ambiguous" not in caplog.text
    assert "WARNING: tiny:" in out and "99% on its model card's test set" in out  # a random net is far below
    with pytest.raises(ValueError, match=r"invert=true contradicts .*study.json: its stimuli/ are stored as"):
        run_task("evaluate", [f"models=[{model}]", f"images={stimuli}", "invert=true"], tmp_path / "run2")
    run_task("evaluate", [f"models=[{model}]", f"images={stimuli}", "invert=false"], tmp_path / "run3")
