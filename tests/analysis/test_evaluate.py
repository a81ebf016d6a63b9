"""evaluate.py with tiny registered models: folders and manifests -> PNAS model-format responses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_task

from controversial.analysis.model_responses import load_images, stimuli_from_folder, stimuli_from_manifest
from controversial.records.manifest import ManifestRow, write_manifest
from controversial.records.names import StimulusNameError, stimulus_filename
from controversial.records.responses import read_model_responses
from controversial.synthesis.stimuli import display_convention, load_png, save_png
from controversial.zoo.bundled import load_model
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch


@pytest.fixture()
def setup(tmp_path):
    checkpoints = {}
    for seed, name in ((1, "tiny_a"), (2, "tiny_b")):
        kwargs = {"image_shape": [1, 28, 28], "hidden": 8, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset="mnist",
            calibration=Calibration(0.5, -1.0, "identity"),
        )
        checkpoints[name] = tmp_path / f"{name}.pt"
        save_checkpoint(checkpoints[name], create_arch("tiny_mlp", **kwargs), info)
    folder = tmp_path / "stimuli"
    rng = np.random.default_rng(0)
    rows = []
    for seed, (a, b) in enumerate([(3, 7), (1, 0)]):
        name = stimulus_filename("tiny_a", str(a), "tiny_b", str(b), seed)
        save_png(folder / name, rng.random((1, 28, 28)))
        rows.append(
            ManifestRow(
                "mnist",
                "tiny_a",
                "tiny_b",
                a,
                b,
                str(a),
                str(b),
                seed,
                "synthetic",
                "noise",
                10,
                True,
                0.9,
                1.0,
                0.9,
                0.1,
                0.1,
                0.9,
                seed == 0,
                "accepted" if seed == 0 else "below_threshold",
                name,
                0.1,
            )
        )
    save_png(folder / "MNIST_4_9.png", rng.random((1, 28, 28)))
    write_manifest(folder / "manifest.csv", rows)
    return tmp_path, checkpoints, folder


def test_folder_and_manifest_stimuli(setup):
    _, _, folder = setup
    from_folder = stimuli_from_folder(folder)
    assert [s.image for s in from_folder] == [
        "MNIST_4_9.png",
        "tiny_a_1_vs_tiny_b_0_seed1.png",
        "tiny_a_3_vs_tiny_b_7_seed0.png",
    ]
    accepted = stimuli_from_manifest(folder / "manifest.csv")
    assert [s.targets for s in accepted] == [("tiny_a", "tiny_b", "3", "7")]
    assert len(stimuli_from_manifest(folder / "manifest.csv", include_rejected=True)) == 2


def run_evaluate(tmp_path: Path, overrides: list[str]) -> Path:
    return run_task("evaluate", overrides, tmp_path)


def test_evaluate_task_matches_the_models(setup, capsys):
    tmp_path, checkpoints, folder = setup
    models = f"models=[{checkpoints['tiny_a']},{checkpoints['tiny_b']}]"
    path = run_evaluate(tmp_path / "run", [models, f"images={folder}", "batch_size=2"])
    assert "2 models x 3 images" in capsys.readouterr().out
    table = read_model_responses(path)
    assert len(table.rows) == 2 * 3 * 10
    model = load_model(str(checkpoints["tiny_b"]))
    image = torch.from_numpy(load_png(folder / "tiny_a_3_vs_tiny_b_7_seed0.png"))[None]
    with torch.inference_mode():
        expected = model.probabilities(image)[0].double().numpy()
    got = {
        r.category: r.probability
        for r in table.rows
        if r.model == "tiny_b" and r.image == "tiny_a_3_vs_tiny_b_7_seed0.png"
    }
    np.testing.assert_allclose([got[str(k)] for k in range(10)], expected, rtol=1e-6)
    row = next(r for r in table.rows if r.image == "tiny_a_3_vs_tiny_b_7_seed0.png")
    assert row.targets == ("tiny_a", "tiny_b", "3", "7")
    manifest_run = run_evaluate(tmp_path / "run2", [models, f"manifests=[{folder / 'manifest.csv'}]"])
    assert {r.image for r in read_model_responses(manifest_run).rows} == {"tiny_a_3_vs_tiny_b_7_seed0.png"}


def test_evaluate_needs_models_and_stimuli(setup):
    tmp_path, checkpoints, folder = setup
    with pytest.raises(ValueError, match="models\n  List should have at least 1 item"):
        run_evaluate(tmp_path / "a", [f"images={folder}"])
    with pytest.raises(ValueError, match="no stimuli"):
        run_evaluate(tmp_path / "b", [f"models=[{checkpoints['tiny_a']}]"])


PNAS = Path(os.environ.get("CONTROVERSIAL_DATA_ROOT", "data")) / "pnas2020"


def test_display_convention_is_detected_and_explicit(caplog):
    digit = np.zeros((1, 28, 28))
    digit[0, 8:20, 12:16] = 1.0
    dark_on_light = [1.0 - digit] * 3
    assert display_convention(dark_on_light).invert is True
    assert display_convention([digit] * 3).invert is False
    assert display_convention(dark_on_light, "false").invert is False and display_convention([digit], "true").invert
    assert display_convention([np.full((3, 32, 32), 0.9)]).invert is False  # colour images are used as stored
    with caplog.at_level("WARNING"):
        mixed = display_convention([digit, 1.0 - digit, 1.0 - digit])
    assert mixed.invert is True and "ambiguous: pass invert=true or invert=false" in caplog.text


def test_pnas_names_in_evaluate(setup):
    tmp_path, checkpoints, _ = setup
    folder = tmp_path / "pnas"
    digit = np.ones((1, 28, 28))
    digit[0, 8:20, 12:16] = 0.0  # stored as displayed: dark digit on white
    for name in (
        "Gaussian_KDE_0_Sarasra_Capsule_1.png",
        "MNIST_000_8.png",
        "schott_VAE_3_small_VGG_5.png",
        "schott_VAE_3_small_VGG_5_repeated.png",
    ):
        save_png(folder / name, digit)
    stimuli = stimuli_from_folder(folder, "pnas2020")
    assert [s.image for s in stimuli] == ["Gaussian_KDE_0_Sarasra_Capsule_1", "MNIST_000_8", "schott_VAE_3_small_VGG_5"]
    assert stimuli[0].targets == ("Gaussian_KDE", "Sarasra_Capsule", "0", "1") and stimuli[1].targets == ("",) * 4
    with pytest.raises(StimulusNameError, match="Gaussian_KDE_0_Sarasra_Capsule_1.png: not a stimulus name .*pnas2020"):
        stimuli_from_folder(folder)
    models = f"models=[{checkpoints['tiny_a']}]"
    table = read_model_responses(run_evaluate(tmp_path / "run", [models, f"images={folder}", "naming=pnas2020"]))
    model = load_model(str(checkpoints["tiny_a"]))
    with torch.inference_mode():
        expected = model.probabilities(torch.from_numpy(1.0 - load_png(folder / "MNIST_000_8.png"))[None])[0].numpy()
    got = {r.category: r.probability for r in table.rows if r.image == "MNIST_000_8"}
    np.testing.assert_allclose([got[str(k)] for k in range(10)], expected, rtol=1e-6)
    save_png(folder / "schott_VAE_3_small_VGG_5_repeated.png", 1.0 - digit)
    with pytest.raises(ValueError, match="_repeated.png: a repeated presentation whose pixels differ"):
        stimuli_from_folder(folder, "pnas2020")


@pytest.mark.data
def test_pnas_sample_display_convention_and_repeats():
    if not PNAS.is_dir():
        pytest.skip(f"{PNAS} not found (set CONTROVERSIAL_DATA_ROOT)")
    exp1 = stimuli_from_folder(PNAS / "experiment_1_sample", "pnas2020")
    images, convention = load_images(exp1)
    assert len(exp1) == 140 and convention.invert and convention.light == 140
    assert images[:, 0, :2].mean() < 0.05  # the background is black after undoing the display convention
    exp2 = stimuli_from_folder(PNAS / "experiment_2_sample", "pnas2020")
    assert len(exp2) == 100  # 104 files, 4 of them repeated presentations of the same pixels
    assert load_images(exp2)[1].invert is False
