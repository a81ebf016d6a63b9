"""``evaluate.py decisions.enabled=true``: a model's decisions on labelled images in the benchmark's raw-data
format, equal to the arg-max of its probabilities, and into the benchmark's table with one analyze command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ANALYZE_SMALL, run_analyze, run_task, settings_for, write_tiny_checkpoints

from controversial.analysis.benchmark.decision_options import BENCHMARK_NAMES
from controversial.analysis.benchmark.model_decisions import labelled_images
from controversial.records.choices import read_trials, write_trials
from controversial.synthesis.stimuli import load_png, save_png
from controversial.zoo.bundled import load_model


def digits(folder: Path, n: int = 12) -> list[tuple[str, str, str]]:
    """``n`` random MNIST-shaped images named as the benchmark names them: (file name, condition, label)."""
    rng = np.random.default_rng(0)
    made = []
    for k in range(n):
        condition, label = ("c1" if k < n // 2 else "c2"), str(k % 10)
        name = f"{k:04d}_mn_dnn_{condition}_{label}_00_img{k}.png"
        save_png(folder / name, rng.random((1, 28, 28)))
        made.append((name, condition, label))
    return made


def test_decisions_are_the_argmax_in_the_benchmarks_format(tmp_path):
    models = write_tiny_checkpoints(tmp_path / "models", ["tiny_a", "tiny_b"], "mnist")
    made = digits(tmp_path / "digits")
    refs = f"models=[{models / 'tiny_a.pt'},{models / 'tiny_b.pt'}]"
    folder = run_task(
        "evaluate", [refs, f"images={tmp_path / 'digits'}", "decisions.enabled=true", "invert=false"], tmp_path / "out"
    )
    assert folder == tmp_path / "out" / "digits"
    pixels = torch.from_numpy(np.stack([load_png(tmp_path / "digits" / name) for name, _, _ in made]))
    for model_name in ("tiny_a", "tiny_b"):
        trials = read_trials([folder / f"digits_{model_name}_session_1.csv"])
        model = load_model(str(models / f"{model_name}.pt"))
        with torch.no_grad():
            expected = [model.class_names[k] for k in model.probabilities(pixels).argmax(dim=1).tolist()]
        assert [t.response for t in trials] == expected
        assert [(t.image, t.condition, t.category) for t in trials] == made
        assert {t.subject for t in trials} == {model_name}


def test_a_folder_of_datasets_is_evaluated_in_one_call(tmp_path):
    """The benchmark's layout (one folder per dataset) in one call, each dataset into its own folder of ``out``."""
    models = write_tiny_checkpoints(tmp_path / "models", ["tiny_a"], "mnist")
    digits(tmp_path / "benchmark" / "edges", 4)
    digits(tmp_path / "benchmark" / "sketch", 6)
    args = [f"models=[{models / 'tiny_a.pt'}]", f"images={tmp_path / 'benchmark'}", "decisions.enabled=true"]
    folder = run_task("evaluate", [*args, "invert=false"], tmp_path / "out")
    assert folder == tmp_path / "out"
    assert len(read_trials([folder / "edges" / "edges_tiny_a_session_1.csv"])) == 4
    assert len(read_trials([folder / "sketch" / "sketch_tiny_a_session_1.csv"])) == 6
    with pytest.raises(ValueError, match="decisions.dataset=x names one dataset.*2 dataset folders"):
        run_task("evaluate", [*args, "invert=false", "decisions.dataset=x"], tmp_path / "out2")


def test_a_model_enters_the_benchmark_in_one_command(tmp_path):
    models = write_tiny_checkpoints(tmp_path / "models", ["tiny_a"], "mnist")
    made = digits(tmp_path / "digits")
    out = tmp_path / "decisions"
    run_task(
        "evaluate",
        [f"models=[{models / 'tiny_a.pt'}]", f"images={tmp_path / 'digits'}", "decisions.enabled=true", "invert=false"],
        out,
    )
    rng = np.random.default_rng(1)
    for subject in ("subject-01", "subject-02", "subject-03"):
        rows = [
            [
                subject,
                1,
                k,
                0.4,
                label if rng.random() < 0.7 else "0",
                label,
                condition,
                name.replace("_dnn_", f"_{subject}_"),
            ]
            for k, (name, condition, label) in enumerate(made, start=1)
        ]
        write_trials(tmp_path / "humans" / "digits" / f"digits_{subject}_session_1.csv", rows)
    results = run_analyze(
        tmp_path / "run",
        ANALYZE_SMALL + [f"choices=[{tmp_path / 'humans'},{out}]", "benchmark.kappa_resamples=20", "figures=false"],
    )
    block = results.benchmark.datasets["digits"]
    assert block.names == ["subject-01", "subject-02", "subject-03", "tiny_a"]
    assert block.is_human == [True, True, True, False]
    assert results.benchmark.tables["overall"][0].name == "tiny_a"


def test_labels_outside_the_models_classes_and_unlabelled_names_are_errors(tmp_path):
    models = write_tiny_checkpoints(tmp_path / "models", ["tiny_a"], "mnist")
    save_png(tmp_path / "imgs" / "0001_mn_dnn_0_bird_00_x.png", np.zeros((1, 28, 28)))
    ref = f"models=[{models / 'tiny_a.pt'}]"
    with pytest.raises(ValueError, match=r"labelled bird .*decides among the model's own classes"):
        run_task("evaluate", [ref, f"images={tmp_path / 'imgs'}", "decisions.enabled=true"], tmp_path / "o")
    save_png(tmp_path / "bad" / "bird.png", np.zeros((1, 28, 28)))
    with pytest.raises(ValueError, match=r"bird\.png: the file name does not match decisions\.label_pattern"):
        labelled_images(tmp_path / "bad")


def test_config_default_pattern_is_the_modules():
    settings = settings_for("evaluate", ["models=[x]", "images=somewhere"])
    assert settings.decisions.label_pattern == BENCHMARK_NAMES
    with pytest.raises(Exception, match="named group 'category'"):
        settings_for("evaluate", ["models=[x]", "images=somewhere", "decisions.label_pattern='^(.*)$'"])
