"""wandb tracking is optional, offline by default, and never changes what synthesis produces."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from controversial.errors import UserError
from controversial.records.manifest import read_manifest, without_timing
from controversial.synthesis.engine import (
    noise_images,
    ordered_class_pairs,
    synthesize_batch,
)
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.stimuli import save_png
from controversial.tracking import Tracker, start_tracking
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch

ROOT = Path(__file__).resolve().parents[2]


def test_disabled_tracking_is_a_no_op_and_unknown_modes_are_refused(tmp_path):
    tracker = start_tracking("disabled", "p", tmp_path, "run")
    assert type(tracker) is Tracker and not tracker.enabled
    tracker.log({"x": 1.0}, step=1)
    tracker.finish()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UserError, match="wandb.mode='offlin' is not known; allowed: disabled, offline, online"):
        start_tracking("offlin", "p", tmp_path, "run")


def test_score_callback_sees_every_step_and_leaves_results_unchanged(tiny_pair):
    pairs = ordered_class_pairs()[:12]
    targets, initial = torch.tensor(pairs), noise_images(pairs, [0] * 12, (1, 28, 28))
    settings = SynthesisOptions(max_steps=30)
    seen = []
    plain = synthesize_batch(tiny_pair, targets, initial, settings)
    tracked = synthesize_batch(
        tiny_pair, targets, initial, settings, on_scores=lambda step, hard: seen.append((step, hard))
    )
    for field in ("images", "hard", "smooth", "probabilities", "steps", "converged"):
        assert torch.equal(getattr(plain, field), getattr(tracked, field)), field
    assert [s for s, _ in seen] == list(range(1, len(seen) + 1)) and len(seen[0][1]) == 12
    assert all(h.device.type == "cpu" and not h.requires_grad for _, h in seen)


def test_offline_tracking_writes_into_the_run_dir_without_network(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    save_png(tmp_path / "grid.png", np.zeros((1, 28, 28)))
    tracker = start_tracking("offline", "controversial-test", tmp_path, "abs_vs_vgg", config={"seed": 0})
    tracker.log({"hard/median": 0.5}, step=1)
    tracker.summary({"cells_accepted": 90})
    tracker.log_image("grid", tmp_path / "grid.png")
    tracker.finish()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


@pytest.mark.slow
def test_cli_manifest_is_identical_with_wandb_offline_and_disabled(tmp_path):
    for seed, name in ((1, "abs"), (2, "vgg")):
        kwargs = {"image_shape": [1, 28, 28], "hidden": 16, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset="mnist",
            calibration=Calibration(1.0, -1.0, "identity"),
        )
        save_checkpoint(tmp_path / f"{name}.pt", create_arch("tiny_mlp", **kwargs), info)
    manifests = {}
    for mode in ("disabled", "offline"):
        command = [
            sys.executable,
            "synthesize.py",
            f"output_dir={tmp_path / mode}",
            "progress=false",
            f"wandb.mode={mode}",
            f"model_a.checkpoint={tmp_path}/abs.pt",
            f"model_b.checkpoint={tmp_path}/vgg.pt",
            "synthesis.max_steps=25",
        ]
        result = subprocess.run(
            command,
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert result.returncode == 0, result.stderr
        manifests[mode] = without_timing(read_manifest(tmp_path / mode / "manifest.csv"))
    assert manifests["offline"] == manifests["disabled"]
    assert (
        list((tmp_path / "offline" / "wandb").glob("offline-run-*")) and not (tmp_path / "disabled" / "wandb").exists()
    )
