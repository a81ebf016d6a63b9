"""``analyze.py choices=...`` with models beside the humans: the benchmark's tables in report.md, the same numbers
in results.json, and its figures as PNG and PDF."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from helpers import ANALYZE_SMALL as SMALL
from helpers import run_analyze

from controversial.analysis.benchmark.scores import HUMANS, OVERALL
from controversial.records.choices import write_trials

CLASSES = ["bird", "cat", "dog", "knife"]


def cue_conflict(folder: Path, rng: random.Random) -> None:
    """3 humans who mostly answer the shape, a model that answers the texture, one that guesses."""
    images = [(s, t) for s in CLASSES for t in CLASSES for _ in range(2)]
    for name in ("subject-01", "subject-02", "subject-03", "texture-net", "guesser"):
        rows = []
        for k, (shape, texture) in enumerate(images):
            if name == "texture-net":
                answer = texture
            elif name == "guesser":
                answer = rng.choice(CLASSES)
            else:
                answer = shape if rng.random() < 0.85 else texture
            image = f"{k:04d}_cc_{name}_0_{shape}_00_{shape}{k % 3 + 1}-{texture}{k % 2 + 1}.png"
            rows.append([name, 1, k, 0.5, answer, shape, "0", image])
        write_trials(folder / f"cue-conflict_{name}_session_1.csv", rows)


def contrast(folder: Path, rng: random.Random) -> None:
    """3 humans and the two models over 3 contrast levels (c100 is left out of the numbers)."""
    for name in ("subject-01", "subject-02", "subject-03", "texture-net", "guesser"):
        rows = []
        for k in range(60):
            level = ("c05", "c10", "c100")[k // 20]
            truth = CLASSES[k % 4]
            p = {"c05": 0.3, "c10": 0.6, "c100": 0.95}[level] if name != "guesser" else 0.25
            answer = truth if rng.random() < p else rng.choice(CLASSES)
            rows.append(
                [name, 1, k, 0.5, answer, truth, "" if name == "guesser" else level, f"{k:04d}_{name}_i{k}.png"]
            )
        write_trials(folder / f"contrast_{name}_session_1.csv", rows)


@pytest.mark.slow
def test_benchmark_tables_json_and_figures(tmp_path):
    rng = random.Random(0)
    cue_conflict(tmp_path / "raw" / "cue-conflict", rng)
    contrast(tmp_path / "raw" / "contrast", rng)
    out = tmp_path / "run"
    results = run_analyze(out, SMALL + [f"choices={tmp_path / 'raw'}", "benchmark.kappa_resamples=60"])
    bench = results.benchmark
    assert bench is not None and set(bench.datasets) == {"contrast", "cue-conflict"}
    assert bench.datasets["contrast"].excluded_conditions == ["c100"]
    overall = bench.tables[OVERALL]
    assert [r.name for r in overall][-1] == HUMANS and {r.name for r in overall[:2]} == {"texture-net", "guesser"}
    texture = next(r for r in overall if r.name == "texture-net")
    assert texture.shape_bias == pytest.approx(0.0) and texture.datasets == 2
    assert bench.shape_bias["cue-conflict"]["subject-01"].shape_bias > 0.7
    assert bench.kappa_tests["cue-conflict"].n_resamples == 60

    report = (out / "report.md").read_text()
    assert "## Model-vs-human benchmark" in report and "### Over the 2 dataset(s) that hold every model" in report
    assert "Left out of the numbers (the benchmark's rule): c100." in report
    assert f"| {texture.mean_rank:.2f} | texture-net | 2 | {texture.ood_accuracy:.3f} [" in report
    saved = json.loads((out / "results.json").read_text())["benchmark"]
    row = next(r for r in saved["tables"][OVERALL] if r["name"] == "texture-net")
    assert row["error_consistency"] == pytest.approx(texture.error_consistency)
    assert saved["datasets"]["cue-conflict"]["shape_bias"] is not None
    for name in ("metrics", "accuracy_contrast", "kappa_cue-conflict", "shape_bias_cue-conflict"):
        for suffix in (".png", ".pdf"):
            assert (out / f"fig_mvh_{name}{suffix}").stat().st_size > 5000, name
    assert "fig_mvh_kappa_contrast.png" in report
