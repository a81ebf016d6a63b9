"""Error consistency against hand-computed examples and brute force over small binary vectors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from controversial.analysis import error_consistency as ec
from controversial.records.choices import read_trials, write_trials
from controversial.records.csvfile import InputError

I = np.array([1, 1, 1, 0, 0, 1, 0, 1, 1, 1], bool)
J = np.array([1, 1, 0, 0, 1, 1, 0, 1, 1, 0], bool)


def test_hand_computed_pair():
    # p_i = .7, p_j = .6; 7 of 10 trials agree; c_exp = .42 + .12 = .54; kappa = .16 / .46 = 8/23.
    assert ec.c_obs(I, J) == pytest.approx(0.7)
    assert ec.c_exp(0.7, 0.6) == pytest.approx(0.54)
    assert ec.kappa(0.7, 0.54) == pytest.approx(8 / 23)
    assert ec.unbiased_kappa(8 / 23, 10) == pytest.approx(16 / 43)
    data = ec.DecisionData(
        ("i", "j"), tuple(map(str, range(10))), np.array(["c"] * 10), np.stack([I, J]), np.ones((2, 10), bool)
    )
    result = ec.consistency(data)
    assert result.kappa[0, 1] == pytest.approx(8 / 23) and result.kappa[1, 0] == pytest.approx(8 / 23)
    assert result.c_obs[0, 1] == pytest.approx(0.7) and result.c_exp[0, 1] == pytest.approx(0.54)
    np.testing.assert_allclose(result.accuracy, [0.7, 0.6])
    assert result.kappa_unbiased[0, 1] == pytest.approx(16 / 43)


def test_c_exp_one_convention_is_explicit():
    both_right = np.ones(5, bool)
    observed, expected = ec.c_obs(both_right, both_right), ec.c_exp(1.0, 1.0)
    assert expected == 1.0
    assert np.isnan(ec.kappa(observed, expected, c_exp_one="nan"))
    assert ec.kappa(observed, expected, c_exp_one="one") == 1.0
    with pytest.raises(ValueError, match="c_exp_one"):
        ec.kappa(1.0, 1.0, c_exp_one="zero")


def test_per_condition_aggregation_averages_condition_kappas():
    conditions = np.array(["a"] * 5 + ["b"] * 5)
    data = ec.DecisionData(("i", "j"), tuple(map(str, range(10))), conditions, np.stack([I, J]), np.ones((2, 10), bool))
    per = ec.consistency(data, aggregation="per_condition")
    ka = ec.kappa(ec.c_obs(I[:5], J[:5]), ec.c_exp(I[:5].mean(), J[:5].mean()))
    kb = ec.kappa(ec.c_obs(I[5:], J[5:]), ec.c_exp(I[5:].mean(), J[5:].mean()))
    assert per.kappa[0, 1] == pytest.approx((ka + kb) / 2)
    assert per.n[0, 1] == 10


def test_pairs_use_only_shared_trials():
    available = np.ones((2, 10), bool)
    available[1, 8:] = False
    data = ec.DecisionData(("i", "j"), tuple(map(str, range(10))), np.array(["c"] * 10), np.stack([I, J]), available)
    result = ec.consistency(data)
    expected = ec.kappa(ec.c_obs(I[:8], J[:8]), ec.c_exp(I[:8].mean(), J[:8].mean()))
    assert result.kappa[0, 1] == pytest.approx(expected) and result.n[0, 1] == 8


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_bounds_hold_over_all_binary_vectors(n):
    vectors = np.array(list(itertools.product([0, 1], repeat=n)), bool)
    i, j = np.meshgrid(np.arange(len(vectors)), np.arange(len(vectors)), indexing="ij")
    a, b = vectors[i.ravel()], vectors[j.ravel()]
    p_i, p_j = a.mean(axis=1), b.mean(axis=1)
    observed = (a == b).mean(axis=1)
    expected = ec.c_exp(p_i, p_j)
    low, high = ec.c_obs_bounds(p_i, p_j)
    assert ((low - 1e-12 <= observed) & (observed <= high + 1e-12)).all()
    # Both c_obs bounds are attained for every pair of accuracies.
    for key in set(zip(p_i, p_j)):
        sel = (p_i == key[0]) & (p_j == key[1])
        assert observed[sel].min() == pytest.approx(low[sel][0]) and observed[sel].max() == pytest.approx(high[sel][0])
    value = ec.kappa(observed, expected)
    k_low, k_high = ec.kappa_bounds(expected)
    finite = np.isfinite(value)
    assert ((k_low[finite] - 1e-9 <= value[finite]) & (value[finite] <= k_high[finite] + 1e-9)).all()


def test_kappa_bounds_are_attained_at_equal_accuracies():
    # With p_i = p_j = p and identical vectors kappa = 1 (the upper bound for c_exp >= .5); with
    # complementary vectors at p = .5 kappa = -1, the lower bound at c_exp = .5.
    low, high = ec.kappa_bounds(np.array([0.5]))
    assert low[0] == pytest.approx(-1.0) and high[0] == pytest.approx(1.0)
    v = np.array([1, 0, 1, 0], bool)
    assert ec.kappa(ec.c_obs(v, ~v), ec.c_exp(0.5, 0.5)) == pytest.approx(low[0])


def test_null_band_lies_within_analytic_bounds():
    band = ec.null_band(n_trials=160, grid_size=60, repeats=3, n_bins=20, seed=0)
    for b in range(20):
        lo_e, hi_e = band.bin_edges[b], band.bin_edges[b + 1]
        grid = np.linspace(lo_e, hi_e, 50)
        k_low, k_high = ec.kappa_bounds(grid)
        if np.isfinite(band.kappa[b]).all():
            assert band.kappa[b, 0] >= np.nanmin(k_low) - 1e-9 and band.kappa[b, 1] <= np.nanmax(k_high) + 1e-9
            # Independent observers: the central band of kappa straddles zero.
            assert band.kappa[b, 0] <= 0 <= band.kappa[b, 1]
        if np.isfinite(band.c_obs[b]).all():
            # c_obs >= 2 c_exp - 1 and c_obs <= 1 follow from the c_obs bounds; for independent
            # observers the band also contains the diagonal c_obs = c_exp.
            assert band.c_obs[b, 0] <= hi_e + 1e-9 and band.c_obs[b, 1] >= lo_e - 1e-9


def test_group_mean_ci_uses_sem():
    values = [0.1, 0.2, 0.3, 0.4]
    mean, sem, lo, hi = ec.group_mean_ci(values, 0.95)
    assert mean == pytest.approx(0.25)
    assert sem == pytest.approx(np.std(values, ddof=1) / 2)
    assert lo == pytest.approx(0.25 - 1.959963984540054 * sem) and hi == pytest.approx(0.25 + 1.959963984540054 * sem)


def test_bootstrap_kappa_ci_brackets_estimate_and_is_reproducible():
    rng = np.random.default_rng(0)
    truth = rng.random(400) < 0.7
    correct = np.stack([truth ^ (rng.random(400) < p) for p in (0.1, 0.2, 0.3)])
    data = ec.DecisionData(
        ("a", "b", "c"), tuple(map(str, range(400))), np.array(["x", "y"] * 200), correct, np.ones((3, 400), bool)
    )
    ci = ec.bootstrap_kappa(data, n_resamples=300, seed=3)
    again = ec.bootstrap_kappa(data, n_resamples=300, seed=3)
    np.testing.assert_array_equal(ci, again)
    point = ec.consistency(data).kappa
    iu = np.triu_indices(3, 1)
    assert (ci[..., 0][iu] <= point[iu]).all() and (point[iu] <= ci[..., 1][iu]).all()
    per = ec.bootstrap_kappa(data, n_resamples=100, seed=3, aggregation="per_condition")
    assert np.isfinite(per[iu]).all()


def test_categorical_kappa_hand_example():
    # Two raters, 3 labels; agree on 4 of 6. Marginals: a=(2,2,2)/6, b=(3,2,1)/6 -> p_e = (6+4+2)/36 = 1/3.
    a = np.array([0, 0, 1, 1, 2, 2])
    b = np.array([0, 0, 1, 1, 0, 1])
    k = ec.categorical_kappa(np.stack([a, b]))
    assert k[0, 1] == pytest.approx((4 / 6 - 1 / 3) / (1 - 1 / 3))
    assert k[0, 0] == pytest.approx(1.0)


def test_trials_reader_counts_missed_responses_as_incorrect(tmp_path):
    rows_a = [
        ["s1", 1, 1, 500, "dog", "dog", "c1", "img1"],
        ["s1", 1, 2, 400, "na", "cat", "c1", "img2"],
        ["s1", 1, 3, 300, "cat", "car", "c2", "img3"],
    ]
    rows_b = [
        ["s2", 1, 1, 500, "dog", "dog", "c1", "img1"],
        ["s2", 1, 2, 400, "cat", "cat", "c1", "img2"],
        ["s2", 1, 3, 300, "cat", "car", "c2", "img3"],
    ]
    write_trials(tmp_path / "s1.csv", rows_a)
    write_trials(tmp_path / "s2.csv", rows_b)
    trials = read_trials([tmp_path / "s1.csv", tmp_path / "s2.csv"])
    assert trials[1].response is None
    data = ec.decisions_from_trials(trials)
    np.testing.assert_array_equal(data.correct, [[True, False, False], [True, True, False]])
    assert list(data.conditions) == ["c1", "c1", "c2"]


def test_trials_disagreeing_on_an_image_category_are_an_error(tmp_path):
    write_trials(tmp_path / "s1.csv", [["s1", 1, 1, 500, "dog", "dog", "c1", "img1"]])
    write_trials(tmp_path / "s2.csv", [["s2", 1, 1, 500, "dog", "cat", "c1", "img1"]])
    with pytest.raises(
        InputError,
        match=r"s2\.csv, row 2, column 'category': stimulus 'img1' has category 'cat', "
        r"but .*s1\.csv, row 2 says 'dog'",
    ):
        ec.decisions_from_trials(read_trials([tmp_path / "s1.csv", tmp_path / "s2.csv"]))
