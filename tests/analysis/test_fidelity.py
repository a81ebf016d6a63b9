"""fidelity.py: our models scored on the paper's stimuli, with missing models named, never a crash."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_task

from controversial.analysis.fidelity import model_fidelity
from controversial.analysis.model_responses import stimuli_from_folder
from controversial.records.fidelity import FIDELITY_COLUMNS
from controversial.synthesis.stimuli import save_png
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch

NAMES = (
    "Gaussian_KDE_0_Wen_Global_PCN_E4_8.png",
    "Gaussian_KDE_3_schott_VAE_5.png",
    "MNIST_000_8.png",
    "MNIST_001_3.png",
)


@pytest.fixture()
def folder(tmp_path):
    digit = np.ones((1, 28, 28))
    digit[0, 8:20, 12:16] = 0.0
    for name in NAMES:
        save_png(tmp_path / "stimuli" / name, digit)
    return tmp_path / "stimuli"


def test_detection_hard_score_and_agreement(folder):
    stimuli = stimuli_from_folder(folder, "pnas2020")
    p = np.full((2, 4, 10), 0.1)
    p[0, 0, 0] = p[0, 1, 3] = 0.9  # kde sees 0 (and not 8), then 3 (and not 5): as the paper's KDE was driven to
    p[1, 0, 8], p[1, 0, 0] = 0.8, 0.7  # pcn sees 8 but does not reject 0
    p[:, 2, 8] = p[:, 3, 3] = 0.95  # both right on the natural images
    result = model_fidelity(stimuli, p, ("kde", "pcn"), tuple("0123456789"), "mnist")
    kde, pcn = result.per_model
    assert (kde.n_stimuli, kde.detects, kde.rejects, kde.both, kde.natural_accuracy) == (2, 1.0, 1.0, 1.0, 1.0)
    assert (pcn.handle, pcn.n_stimuli, pcn.detects, pcn.rejects) == ("Wen_Global_PCN_E4", 1, 1.0, 0.0)
    assert result.missing == {"schott_VAE": "abs"} and result.skipped == 1 and len(result.rows) == 1
    assert result.rows[0].hard_score == pytest.approx(0.3)  # min(.9, 1 - .1, .8, 1 - .7)
    np.testing.assert_allclose(result.agreement, [[1, 0.5], [0.5, 1]])  # the same decision on the two natural images


def test_task_names_the_models_not_trained_yet(tmp_path, folder, capsys):
    models = tmp_path / "models"
    for seed, name in ((1, "kde"), (2, "pcn")):
        kwargs = {"image_shape": [1, 28, 28], "hidden": 8, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset="mnist",
            calibration=Calibration(0.5, -1.0, "identity"),
        )
        save_checkpoint(models / "mnist" / f"{name}.pt", create_arch("tiny_mlp", **kwargs), info)
    out = tmp_path / "run"
    out.mkdir()
    run_task("fidelity", [f"images={folder}", f"models_dir={models}"], out)
    printed = capsys.readouterr().out
    assert "not trained yet for mnist: vgg, vgg_neg, capsnet, madry_linf, madry_l2, capsnet_recon, abs" in printed
    report = (out / "report.md").read_text()
    assert "abs (for schott_VAE)" in report and "| kde vs pcn | 1 |" in report
    assert "140 of" not in report and "inverting all" in report
    assert (out / "fidelity.csv").read_text().splitlines()[0] == ",".join(FIDELITY_COLUMNS)
