"""The vectorised bootstrap against a plain, loop-by-loop reference on the same resamples."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from controversial.analysis.bootstrap import (
    BLOCK,
    LOWER,
    UPPER,
    Distributions,
    SufficientStatistics,
    bootstrap,
    counts,
    draw_block,
    draw_counts,
    iter_blocks,
    pairwise_tests,
    percentile_ci,
    pooled_bootstrap,
    strata,
)
from controversial.analysis.ceilings import noise_ceiling
from controversial.analysis.correlation import participant_model_correlations
from controversial.analysis.count_product import CountProduct
from controversial.references.bootstrap import reference_bootstrap


def small_study(seed: int = 1, S: int = 4, M: int = 3, K: int = 5):
    rng = np.random.default_rng(seed)
    conditions = np.array(["natural"] * 4 + ["a|b"] * 3 + ["a|c"] * 3)
    N = len(conditions)
    truth = rng.random((N, K))
    human = np.clip(np.round((truth + 0.3 * rng.standard_normal((S, N, K))) * 4) / 4, 0, 1)
    model = np.clip(truth + 0.2 * rng.standard_normal((M, N, K)), 0, 1)
    return human, model, conditions


@pytest.mark.parametrize("include_copies", [False, True])
def test_fast_bootstrap_matches_reference_including_duplicates(include_copies):
    human, model, conditions = small_study()
    n = 60
    fast = bootstrap(
        human,
        model,
        ["m0", "m1", "m2"],
        conditions,
        n_resamples=n,
        seed=7,
        chunk_size=BLOCK,
        include_copies=include_copies,
    )
    reference = reference_bootstrap(human, model, conditions, n, seed=7, include_copies=include_copies)
    assert fast.samples.shape == reference.shape == (n, 5)
    np.testing.assert_allclose(fast.samples, reference, rtol=0, atol=1e-9)
    # The resamples really contained duplicated participants and stimuli.
    assert np.isfinite(reference).all()
    block = next(iter_blocks(n, 7, human.shape[0], conditions))
    assert any(len(set(p)) < len(p) for p in block.participants)
    assert any(len(set(s)) < len(s) for s in block.stimuli)


def test_point_estimates_match_direct_correlations_and_ceilings():
    human, model, conditions = small_study(seed=3, S=6)
    dist = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=10, seed=0)
    r = participant_model_correlations(human, model)
    ceiling = noise_ceiling(human)
    np.testing.assert_allclose(dist.estimates, [*r.mean(axis=0), ceiling.lower, ceiling.upper], atol=1e-12)
    assert dist.names == ("m0", "m1", "m2", LOWER, UPPER)


def test_resamples_stay_within_strata_and_depend_only_on_seed():
    human, model, conditions = small_study()
    groups = strata(conditions)
    for block in iter_blocks(2 * BLOCK + 5, 11, human.shape[0], conditions):
        start = 0
        for g in groups:
            assert np.isin(block.stimuli[:, start : start + len(g)], g).all()
            start += len(g)
    a = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=2500, seed=5, chunk_size=1000)
    b = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=2500, seed=5, chunk_size=3000)
    c = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=2500, seed=6, chunk_size=3000)
    # Same resamples whatever the chunking; only BLAS summation order may differ.
    np.testing.assert_allclose(a.samples, b.samples, rtol=0, atol=1e-12)
    assert not np.array_equal(a.samples, c.samples)


def test_counts_of_indices():
    got = counts(np.array([[0, 0, 2], [1, 2, 2]]), 3)
    np.testing.assert_array_equal(got, [[2, 0, 1], [0, 1, 2]])


def test_pairwise_tests_hand_example():
    # Entity a is above b in every resample; b and c overlap completely.
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(1000)
    samples = np.stack([noise + 10, noise, noise[::-1]], axis=1)
    dist = Distributions(("a", "b", "c"), np.array([10.0, 0.0, 0.0]), samples, seed=0)
    tests = pairwise_tests(dist, alpha=0.05)
    assert tests.p_two_tailed[0, 1] == 0.0 and tests.significance[0, 1] == 1 and tests.significance[1, 0] == -1
    d = samples[:, 1] - samples[:, 2]
    assert tests.p_two_tailed[1, 2] == pytest.approx(min(1, 2 * min(np.mean(d <= 0), np.mean(d >= 0))))
    assert tests.significance[1, 2] == 0
    # Holm-Sidak: the smallest of m p-values is compared with 1 - (1 - p)^m.
    p_sorted = np.sort(tests.p_two_tailed[np.triu_indices(3, 1)])
    assert np.nanmin(tests.p_corrected) == pytest.approx(1 - (1 - p_sorted[0]) ** 3)


def test_percentile_ci_brackets_the_estimate():
    human, model, conditions = small_study(seed=2, S=6)
    dist = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=2000, seed=1)
    ci = percentile_ci(dist.samples, 0.95)
    assert ci.shape == (5, 2)
    assert (ci[:, 0] <= dist.estimates + 0.05).all() and (ci[:, 1] >= dist.estimates - 0.05).all()
    assert (ci[:, 0] < ci[:, 1]).all()


def test_no_ceiling_mode_matches_model_columns():
    human, model, conditions = small_study()
    full = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=200, seed=2)
    light = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=200, seed=2, ceilings=False)
    np.testing.assert_allclose(light.samples, full.samples[:, :3], atol=1e-12)
    assert light.names == ("m0", "m1", "m2")


def test_memory_grows_linearly_with_participants():
    """600 participants: a per-participant-pair table would need N S^2 / 2 floats (and S^2 per resample)."""
    import tracemalloc

    human, model, conditions = small_study(seed=4, S=600, M=2, K=2)
    tracemalloc.start()
    bootstrap(human, model, ["m0", "m1"], conditions, n_resamples=1000, seed=0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the pair table alone would be 1000 x 600^2 x 8 B = 2.9 GB
    assert peak < 256 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_pooled_parts_weight_participants_and_one_part_is_the_plain_bootstrap():
    """Replications (or adaptive batches) with their own stimuli: the pooled estimate is the
    participant-weighted mean of the parts', each part resampled on its own with seed + i."""
    h1, m1, c1 = small_study(seed=1, S=3)
    h2, m2, c2 = small_study(seed=2, S=4)
    names = ("m0", "m1", "m2")
    alone = [bootstrap(h, m, names, c, 300, seed=5 + i) for i, (h, m, c) in enumerate([(h1, m1, c1), (h2, m2, c2)])]
    pooled = pooled_bootstrap([(h1, m1, c1), (h2, m2, c2)], names, 300, seed=5)
    np.testing.assert_allclose(pooled.estimates, (3 * alone[0].estimates + 4 * alone[1].estimates) / 7)
    np.testing.assert_allclose(pooled.samples, (3 * alone[0].samples + 4 * alone[1].samples) / 7)
    single = pooled_bootstrap([(h1, m1, c1)], names, 300, seed=5)
    np.testing.assert_array_equal(single.samples, alone[0].samples)


@pytest.mark.parametrize("S, K", [(4, 5), (10, 1)])
def test_both_ceiling_paths_match_reference(S, K):
    # S + 1 <= 8 K takes the table of participant pairs, more participants the pooled products.
    human, model, conditions = small_study(seed=4, S=S, K=K)
    stats = SufficientStatistics(human, model)
    assert stats.pairwise == (S + 1 <= 8 * K)
    fast = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=40, seed=3)
    reference = reference_bootstrap(human, model, conditions, 40, seed=3)
    np.testing.assert_allclose(fast.samples, reference, rtol=0, atol=1e-9)


def test_count_product_is_exact_on_a_grid_and_float64_close_off_it(monkeypatch):
    """Grid columns (ratings, their squares and cross-products) sum exactly in int8 digits, with counts past
    one digit and the stimuli split into several products; other columns are exact sums of the table
    rounded to 2**-54 of the column's largest entry, so within float64 rounding of the true sums."""
    rng = np.random.default_rng(0)
    N = 50
    grid = rng.integers(-160, 161, size=(N, 6)) / 16.0  # multiples of 1/16 of either sign
    grid[:, 0] = 0.0  # an empty column
    grid[:, 1] = rng.integers(0, 2**40, size=N) * 2.0**-20  # a grid that needs six digits
    off_grid = rng.random((N, 4)) ** 3 * np.array([1.0, 1e-3, 1e5, -7.0])  # spanning more than 2**54 units
    table = np.concatenate([grid, off_grid], axis=1)
    counts_ = rng.integers(0, 4, size=(30, N))
    counts_[0, 3] = 300  # past one int8 digit
    exact = np.array(
        [[sum(int(c) * Fraction(float(t)) for c, t in zip(row, col)) for col in table.T] for row in counts_]
    )
    product = CountProduct(table)  # one product: int32 digit sums, paired up in int32 for small counts
    monkeypatch.setattr(CountProduct, "ROWS", 7)  # several products over the stimuli, summed in int64
    split = CountProduct(table)
    assert product.exact.tolist() == [True] * 6 + [False] * 4
    for c, product in itertools.product((counts_, counts_[1:].astype(np.int8)), (product, split)):
        got = product(c)  # int8 counts take the one-digit path
        np.testing.assert_array_equal(product.transposed(np.ascontiguousarray(c.T))[1], c.sum(axis=1))
        want = exact[-len(c) :]
        np.testing.assert_array_equal(got[:, :6], want[:, :6].astype(np.float64))
        scale = np.abs(table[:, 6:]).max(axis=0) * np.abs(c).sum(axis=1, keepdims=True)
        assert (np.abs(got[:, 6:] - want[:, 6:].astype(np.float64)) <= 2.0**-52 * scale).all()
    with pytest.raises(ValueError, match="whole numbers"):
        product(np.full((1, N), 0.5))


def test_threads_give_the_same_numbers():
    human, model, conditions = small_study(seed=6, S=5)
    one = bootstrap(human, model, ["m0", "m1", "m2"], conditions, n_resamples=2500, seed=4, chunk_size=1000)
    two = bootstrap(human, model, ["m0", "m1", "m2"], conditions, 2500, seed=4, chunk_size=1000, threads=2)
    np.testing.assert_array_equal(one.samples, two.samples)


@pytest.mark.parametrize("scatter", [False, True])
@pytest.mark.parametrize("largest, dtype", [(9, np.int8), (130, np.int64)])
def test_counted_draws_are_the_drawn_resamples(largest, dtype, scatter):
    """The fast path counts the draws of draw_block (the reference's resamples) without gathering them, with
    numpy's bincount or torch's scatter_add_; strata come interleaved, and a stratum past 127 stimuli keeps
    wide counts."""
    conditions = np.array(["a"] * largest + ["b"] * 3 + ["c"] * 2)[np.random.default_rng(0).permutation(largest + 5)]
    groups = strata(conditions)
    for child, size in zip(np.random.SeedSequence(3).spawn(2), (BLOCK, 17)):
        block = draw_block(child, 4, groups, size)
        stimulus_counts, participant_counts = draw_counts(child, 4, groups, size, scatter)
        assert stimulus_counts.dtype == dtype
        assert stimulus_counts.shape == (len(conditions), size)  # stimuli by rows, as the int8 product takes them
        np.testing.assert_array_equal(stimulus_counts.T, counts(block.stimuli, len(conditions)))
        np.testing.assert_array_equal(participant_counts, counts(block.participants, 4))


def test_resamples_for_a_seed_never_change():
    # Pinned draws: a change here changes every published bootstrap result for the same seed.
    block = next(iter_blocks(2, 0, 5, ["a", "a", "b", "b", "b"]))
    np.testing.assert_array_equal(block.participants, [[4, 4, 0, 1, 3], [3, 1, 0, 4, 2]])
    np.testing.assert_array_equal(block.stimuli, [[0, 0, 3, 3, 3], [0, 1, 3, 3, 3]])


def test_pair_products_are_fused_multiply_adds_in_order():
    """The ceilings' raw products sum_t pairs[s, t] v_t are added t by t, each step one correctly rounded
    fused multiply-add: the order OpenBLAS's matmul kernel adds them in (the ceilings stay the same numbers
    as when a matmul computed them). Checked against exact rational arithmetic, rounded once per step."""
    human, model, conditions = small_study(seed=8, S=7, K=5)
    stats = SufficientStatistics(human, model)
    assert stats.pairwise
    stimulus_counts, participant_counts = draw_counts(np.random.SeedSequence(2), 7, strata(conditions), 3)
    sums = stats.sums(stimulus_counts)[0]
    w = participant_counts
    a = np.random.default_rng(0).random(w.shape) * w
    raw_w, raw_a = stats._raw_products(stimulus_counts, sums, w, a)
    pairs = [[sums[int(stats.pair_index[t][s])] for t in range(7)] for s in range(7)]
    for got, v in ((raw_w, w), (raw_a, a)):
        for b in range(3):
            for s in range(7):
                acc = 0.0
                for t in range(7):
                    acc = float(Fraction(pairs[s][t][b]) * Fraction(float(v[b, t])) + Fraction(acc))
                assert got[b, s] == acc
