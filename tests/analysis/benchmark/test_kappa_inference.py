"""The kappa CIs and paired test: the point estimate is the benchmark's E, resamples stay within conditions, the
p-value and Holm rules by hand, and the simulated observers have the kappa they are built to have."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controversial.analysis.benchmark import kappa_inference as ki
from controversial.analysis.benchmark.scores import dataset_benchmark
from controversial.analysis.error_consistency import decisions_from_trials
from controversial.records.choices import read_trials

HEADER = "subj,session,trial,rt,object_response,category,condition,imagename\n"


def toy(tmp_path: Path):
    """3 humans and 2 models, 2 conditions x 30 trials of random correctness (seeded)."""
    rng = np.random.default_rng(3)
    files = []
    for name in ("subject-01", "subject-02", "subject-03", "model-a", "model-b"):
        rows = []
        for k in range(60):
            answer = "dog" if rng.random() < 0.6 else "cat"
            condition = "c1" if k < 30 else "c2"
            rows.append(f"{name},1,{k},0.5,{answer},dog,{condition},{k:04d}_x_{name}_dog_00_dog{k}.png")
        files.append(tmp_path / f"{name}.csv")
        files[-1].write_text(HEADER + "\n".join(rows) + "\n")
    data = decisions_from_trials(read_trials(files))
    return data, [n.startswith("subject") for n in data.names]


def test_estimate_is_the_benchmarks_error_consistency_and_cis_cover_it(tmp_path):
    data, is_human = toy(tmp_path)
    block = dataset_benchmark("toy", data, is_human)
    result = ki.infer_dataset("toy", data, is_human, ["c1", "c2"], n_resamples=300, seed=1)
    assert result is not None and result.models == ["model-a", "model-b"]
    for i, name in enumerate(result.models):
        e = block.error_consistency[block.names.index(name)]
        assert result.estimate[i] == pytest.approx(e, abs=1e-12)
        assert result.ci_low[i] < e < result.ci_high[i]
    (pair,) = result.pairs
    assert pair.difference == pytest.approx(result.estimate[0] - result.estimate[1])
    assert pair.p_holm == pair.p_value  # one comparison: nothing to correct
    again = ki.infer_dataset("toy", data, is_human, ["c1", "c2"], n_resamples=300, seed=1)
    assert again == result  # seeded


def test_resamples_stay_within_conditions():
    conditions = np.array([0, 0, 0, 1, 1, 2])
    w = ki.trial_weights(conditions, 50, np.random.default_rng(0))
    assert w[:, :3].sum(axis=1).tolist() == [3] * 50
    assert w[:, 3:5].sum(axis=1).tolist() == [2] * 50
    assert w[:, 5].tolist() == [1] * 50


def test_p_value_counts_both_tails_with_the_add_one_rule():
    d = np.array([-1.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])  # 1 of 9 at or below 0
    assert ki.paired_p_value(d) == pytest.approx(2 * (1 + 1) / 10)
    assert np.isnan(ki.paired_p_value(np.array([np.nan, np.nan])))  # no finite resample: no p-value


def test_holm_by_hand():
    # sorted .01, .02, .04 -> x3 = .03, x2 = .04, x1 = .04 (kept monotone); NaN stays NaN
    adjusted = ki.holm([0.04, 0.01, float("nan"), 0.02])
    assert adjusted[:2] == pytest.approx([0.04, 0.03]) and adjusted[3] == pytest.approx(0.04)
    assert np.isnan(adjusted[2])


def test_copy_observers_have_kappa_copy_i_times_copy_j():
    rng = np.random.default_rng(0)
    correct = ki.copy_observers(200_000, 0.7, np.array([0.6, 0.5, 0.0]), rng)
    kappa = ki.model_human_kappa(correct[:1], correct[1:], np.zeros(200_000, int), np.ones((1, 200_000)))[0, 0]
    assert kappa == pytest.approx([0.3, 0.0], abs=0.01)
    assert correct.mean(axis=1) == pytest.approx([0.7, 0.7, 0.7], abs=0.01)


def test_random_observers_add_the_between_people_spread_beyond_trial_noise():
    rng = np.random.default_rng(0)
    samples = rng.normal(0, 0.1, size=(4000, 4))
    trial = np.var(samples.mean(axis=1), ddof=1)
    own_noise = np.mean(np.var(samples, axis=0, ddof=1)) / 4
    # a spread between people smaller than their own trial noise: the trial variance stays
    small = np.array([0.05, -0.05, 0.05, -0.05])
    assert np.var(small, ddof=1) / 4 < own_noise
    assert ki.random_observer_variance(small, samples) == pytest.approx(trial)
    # people who differ: trial + between / H - own noise / H
    wide = np.array([0.5, -0.5, 0.5, -0.5])
    expected = trial + np.var(wide, ddof=1) / 4 - own_noise
    assert ki.random_observer_variance(wide, samples) == pytest.approx(expected)
    estimate, low, high, p = ki.interval_and_p(wide, samples, "random", 0.95)
    assert estimate == pytest.approx(0.0) and high - low == pytest.approx(2 * 1.959964 * np.sqrt(expected), rel=1e-5)
    assert p == pytest.approx(1.0)


def test_random_observers_in_infer_dataset(tmp_path):
    data, is_human = toy(tmp_path)
    fixed = ki.infer_dataset("toy", data, is_human, ["c1", "c2"], 400, seed=2)
    random = ki.infer_dataset("toy", data, is_human, ["c1", "c2"], 400, seed=2, observers="random")
    assert fixed is not None and random is not None and random.observers == "random"
    assert random.estimate == pytest.approx(fixed.estimate)
    for i in range(2):  # normal theory: symmetric around the estimate
        assert random.ci_high[i] - random.estimate[i] == pytest.approx(random.estimate[i] - random.ci_low[i])
    with pytest.raises(ValueError, match="unknown observers 'all'; allowed: fixed, random"):
        ki.interval_and_p(np.zeros(3), np.zeros((5, 3)), "all", 0.95)  # type: ignore[arg-type]


def test_power_rejects_a_kappa_above_the_human_ceiling():
    with pytest.raises(ValueError, match="must not exceed sqrt"):
        ki.power(100, 0.07, 0.7, 0.33, 3, 0.7, n_datasets=1, n_resamples=10)
