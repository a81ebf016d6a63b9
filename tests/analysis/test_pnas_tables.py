"""The PNAS 2020 release's response tables as published: ``subject code``, names without extension,
repeated presentations, and Experiment 2's two replications pooled (stimuli stratified within replication)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from helpers import ANALYZE_SMALL as SMALL
from helpers import run_analyze

from controversial.datasets import DATASETS
from controversial.records.csvfile import InputError
from controversial.records.responses import HUMAN_COLUMNS, MODEL_COLUMNS, replication

CLASSES = DATASETS["cifar10"].class_names
IMAGES = {  # the same names in both replications (different pixels in the release)
    "CIFAR_10_test_000_8160_frog": ("", "", "", ""),
    "CIFAR_10_test_001_4130_cat": ("", "", "", ""),
    "Gaussian_KDE_frog_vs_JEM-dscrmntv_deer": ("Gaussian_KDE", "JEM-dscrmntv", "frog", "deer"),
    "Gaussian_KDE_cat_vs_JEM-dscrmntv_ship": ("Gaussian_KDE", "JEM-dscrmntv", "cat", "ship"),
    "Wen_PCN_A6_cat_vs_JEM-dscrmntv_dog": ("Wen_PCN_A6", "JEM-dscrmntv", "cat", "dog"),
    "Wen_PCN_A6_bird_vs_JEM-dscrmntv_frog": ("Wen_PCN_A6", "JEM-dscrmntv", "bird", "frog"),
}


def write_release(tmp_path, name: str, seed: int, n_subjects: int = 4):
    rng = np.random.default_rng(seed)
    human = tmp_path / f"Experiment_2_replication_{name[-1]}_human_responses.csv"
    with human.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["subject code", *HUMAN_COLUMNS[1:]])
        for s in range(n_subjects):
            for t, (image, targets) in enumerate(IMAGES.items()):
                for repetition in (0, 1) if t == 2 else (0,):
                    for category in CLASSES:
                        writer.writerow(
                            [
                                f"{name}_S{s + 1:02d}",
                                image,
                                repetition,
                                category,
                                *targets,
                                rng.choice([0, 0.25, 0.5, 0.75, 1]),
                                900,
                                2500,
                                t,
                            ]
                        )
    model = tmp_path / f"{name}_model_responses.csv"
    with model.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(MODEL_COLUMNS)
        for m in ("Gaussian_KDE", "JEM-dscrmntv", "Wen_PCN_A6"):
            for image, targets in IMAGES.items():
                for category in CLASSES:
                    writer.writerow([m, image, category, *targets, rng.random()])
    return human, model


def test_replication_from_subject_code():
    assert replication("Exp2a_S07") == "Exp2a" and replication("Exp1_S01") == "Exp1" and replication("P0001") == ""


@pytest.mark.slow
def test_release_tables_pool_the_two_replications(tmp_path):
    a_human, a_model = write_release(tmp_path, "Exp2a", 1)
    b_human, b_model = write_release(tmp_path, "Exp2b", 2)
    pooled = run_analyze(
        tmp_path / "pooled",
        SMALL + [f"human_ratings=[{a_human},{b_human}]", f"model_responses={{Exp2a: {a_model}, Exp2b: {b_model}}}"],
    )
    alone = [
        run_analyze(tmp_path / name, SMALL + [f"human_ratings={h}", f"model_responses={m}"])
        for name, h, m in (("a", a_human, a_model), ("b", b_human, b_model))
    ]
    assert pooled.inputs.replications == ["Exp2a", "Exp2b"] and len(pooled.study.participants) == 8
    everything = pooled.prediction["all"]
    for model in ("Gaussian_KDE", "JEM-dscrmntv", "Wen_PCN_A6"):
        expected = np.mean([a.prediction["all"].measures["pearson"].mean[model] for a in alone])
        assert everything.measures["pearson"].mean[model] == pytest.approx(expected)
    assert everything.bootstrap.strata == 6 and everything.bootstrap.replications == 2
    assert everything.noise_ceiling["pearson"].lower == pytest.approx(
        np.mean([a.prediction["all"].noise_ceiling["pearson"].lower for a in alone])
    )
    assert pooled.study.exclusions[0]["reason"].startswith("repeated presentation")
    assert "replications pooled: Exp2a, Exp2b" in (tmp_path / "pooled" / "report.md").read_text()


def test_release_tables_with_a_missing_replication_or_a_shared_participant(tmp_path):
    a_human, a_model = write_release(tmp_path, "Exp2a", 1)
    b_human, _ = write_release(tmp_path, "Exp2b", 2)
    with pytest.raises(ValueError, match="model_responses has no entry for replication\\(s\\) Exp2b"):
        run_analyze(
            tmp_path / "x", SMALL + [f"human_ratings=[{a_human},{b_human}]", f"model_responses={{Exp2a: {a_model}}}"]
        )
    with pytest.raises(InputError, match="participant 'Exp2a_S01' is also in"):
        run_analyze(tmp_path / "y", SMALL + [f"human_ratings=[{a_human},{a_human}]", f"model_responses={a_model}"])
