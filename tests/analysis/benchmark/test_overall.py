"""The benchmark's overall table (issue 60, item 10): models and humans compared on the same datasets, with
intervals from resampling each dataset's humans (checked against a loop over the drawn humans), and no rank for
a model ranked alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controversial.analysis.benchmark.intervals import _dataset_draws
from controversial.analysis.benchmark.options import BenchmarkOptions
from controversial.analysis.benchmark.report import benchmark_section, console_table
from controversial.analysis.benchmark.scores import HUMANS, OVERALL, dataset_benchmark, run_benchmark
from controversial.analysis.error_consistency import decisions_from_trials
from controversial.records.choices import read_trials

HEADER = "subj,session,trial,rt,object_response,category,condition,imagename\n"


def write_observer(folder: Path, name: str, pattern: str) -> Path:
    """Trial k shows dog<k>.png in condition c1 (first half) or c2; a wrong answer says cat."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, bit in enumerate(pattern, start=1):
        condition = "c1" if k <= len(pattern) // 2 else "c2"
        answer = "dog" if bit == "1" else "cat"
        rows.append(f"{name},1,{k},0.5,{answer},dog,{condition},{k:04d}_x_{name}_{condition}_dog_00_dog{k}.png")
    (folder / f"{name}.csv").write_text(HEADER + "\n".join(rows) + "\n")
    return folder / f"{name}.csv"


def random_dataset(folder: Path, seed: int, models: tuple[str, ...], humans: int = 5):
    rng = np.random.default_rng(seed)
    names = [f"subject-{i:02d}" for i in range(1, humans + 1)] + list(models)
    patterns = ["".join("1" if b else "0" for b in rng.random(16) < 0.6) for _ in names]
    return read_trials([write_observer(folder, n, p) for n, p in zip(names, patterns)])


def test_models_and_humans_are_compared_on_the_same_datasets(tmp_path):
    both = random_dataset(tmp_path / "both", 0, ("m1", "m2"))
    only_m1 = random_dataset(tmp_path / "only_m1", 1, ("m1",))
    results = run_benchmark({"both": both, "only_m1": only_m1}, "^subject", BenchmarkOptions(kappa_resamples=0), seed=3)
    assert results.overall_datasets == ["both"]
    overall = {r.name: r for r in results.tables[OVERALL]}
    humans_both = results.datasets["both"].human_baseline
    assert overall[HUMANS].error_consistency == pytest.approx(humans_both["error_consistency"])
    assert overall[HUMANS].datasets == 1 and overall["m1"].datasets == 1
    for row in overall.values():
        for metric in ("accuracy_difference", "observed_consistency", "error_consistency"):
            low, high = row.ci[metric]
            assert low <= getattr(row, metric) + 1e-9 and getattr(row, metric) <= high + 1e-9 and low < high
    assert overall["m1"].ci["ood_accuracy"][0] == overall["m1"].ci["ood_accuracy"][1]  # no human involved
    section = "\n".join(benchmark_section(results))
    assert "Over the 1 dataset(s) that hold every model: both" in section and "1000 resamples" in section
    assert f"{overall['m1'].error_consistency:.3f} [" in section


def test_the_resampled_values_are_those_of_the_drawn_humans(tmp_path):
    trials = random_dataset(tmp_path, 4, ("m1", "m2"), humans=4)
    data = decisions_from_trials(trials)
    block = dataset_benchmark("d", data, [n.startswith("subject") for n in data.names])
    counts = np.array([[2.0, 0.0, 1.0, 1.0]])  # subject-01 twice, subject-02 not drawn
    draws = _dataset_draws(block, ["m1", "m2"], counts)
    humans = [block.names.index(f"subject-{i:02d}") for i in (1, 1, 3, 4)]  # the drawn list, with the repeat
    kappa = np.asarray(block.kappa)
    m1 = block.names.index("m1")
    assert draws["error_consistency"][0, 0] == pytest.approx(np.nanmean([kappa[m1, h] for h in humans]))
    per_human = [np.nanmean([kappa[x, h] for h in humans if h != x]) for x in humans]
    assert draws["error_consistency"][0, 2] == pytest.approx(np.mean(per_human))
    ones = _dataset_draws(block, ["m1", "m2"], np.ones((1, 4)))  # every human once: the point estimates
    assert ones["observed_consistency"][0, 2] == pytest.approx(block.human_baseline["observed_consistency"])


def test_a_single_model_has_no_rank(tmp_path):
    trials = random_dataset(tmp_path, 5, ("m1",))
    results = run_benchmark({"d": trials}, "^subject", BenchmarkOptions(kappa_resamples=0, overall_resamples=0))
    assert all(r.mean_rank is None for r in results.tables[OVERALL])
    assert "1.00" not in "\n".join(console_table(results.tables[OVERALL]))
