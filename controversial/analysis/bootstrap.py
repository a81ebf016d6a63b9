"""Participant x stimulus bootstrap of model accuracies and noise ceilings, vectorised.

Resampling stimuli with replacement (stratified by condition) is the same as giving each
stimulus an integer count weight, and every weighted Pearson statistic is linear in those weights.
So one matrix product, count weights (resamples x stimuli) @ per-stimulus sufficient statistics
(sums, squares and cross-products over categories, for participants and models), yields every
model correlation for a chunk of resamples; it runs on int8 digits of the table, exactly
(:class:`CountProduct`). Participant resampling is a second count vector
applied to the per-participant correlations; the ceilings need each participant's covariance with
a weighted pool of participants, from a table of participant pairs while participants are few and
from the pool itself when they are many (see :class:`SufficientStatistics`), so memory grows
linearly with participants, stimuli and models.

Resamples are drawn in fixed blocks of ``BLOCK`` with one ``SeedSequence`` child per block, so the
distribution depends only on the seed, never on the chunk size used to bound memory.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests

from controversial.analysis.count_product import CountProduct, integer_counts
from controversial.errors import UserError

log = logging.getLogger(__name__)

BLOCK = 1000
# Bound on the largest per-chunk array; chunks shrink (never below BLOCK) to fit. Small chunks stay in cache:
# at paper scale, 1,000-resample chunks ran 2.7x faster than 10,000 (same numbers, bit for bit).
CHUNK_BYTES = 8 * 2**20
LOWER, UPPER = "lower noise ceiling", "upper noise ceiling"


@dataclass(frozen=True)
class Resamples:
    """One block of resamples as indices: participants (B, S) and stimuli (B, N), stratum by stratum."""

    participants: np.ndarray
    stimuli: np.ndarray


@dataclass(frozen=True)
class Distributions:
    """Bootstrap distributions of the across-participant mean r: models, then lower and upper ceiling."""

    names: tuple[str, ...]  # models + (LOWER, UPPER) when ceilings were computed
    estimates: np.ndarray  # (P,) on the original data
    samples: np.ndarray  # (n_resamples, P)
    seed: int


@dataclass(frozen=True)
class PairwiseTests:
    names: tuple[str, ...]  # the compared entities: models + lower ceiling
    p_two_tailed: np.ndarray  # (P, P) uncorrected, symmetric, NaN on the diagonal
    p_corrected: np.ndarray  # (P, P) Holm-Sidak over all P(P-1)/2 pairs
    significance: np.ndarray  # (P, P) +1 row significantly above column, -1 below, 0 not significant
    alpha: float


def strata(conditions: np.ndarray | Sequence[str]) -> list[np.ndarray]:
    """Stimulus indices per condition (sorted by name): the bootstrap strata."""
    values = np.asarray(conditions)
    return [np.flatnonzero(values == c).astype(np.int32) for c in sorted(set(values.tolist()))]


def draw_block(seed: np.random.SeedSequence, n_participants: int, groups: list[np.ndarray], size: int) -> Resamples:
    """Draw one block: participants with replacement, and stimuli with replacement within each stratum.

    Indices are int32: numpy draws the same values for int32 as for int64 below 2**32, and the
    narrower arrays halve the memory traffic of gathering and counting them.
    """
    rng = np.random.default_rng(seed)
    participants = rng.integers(0, n_participants, size=(BLOCK, n_participants), dtype=np.int32)[:size]
    stimuli = np.concatenate(
        [g[rng.integers(0, len(g), size=(BLOCK, len(g)), dtype=np.int32)] for g in groups], axis=1
    )[:size]
    return Resamples(participants, stimuli)


def draw_counts(
    seed: np.random.SeedSequence, n_participants: int, groups: list[np.ndarray], size: int, scatter: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """The block :func:`draw_block` draws, as (N, size) stimulus counts, stimuli by rows (int8 while no stratum
    exceeds 127 stimuli), and (size, S) participant counts: the same draws from the same generator, counted
    stratum by stratum (small arrays that stay in cache) without gathering the indices. Stimuli by rows is the
    layout the int8 product takes (:meth:`CountProduct.transposed`), so no copy reorders them.

    ``scatter`` counts with torch's ``scatter_add_`` into the narrow counts directly (2x faster than numpy's
    bincount, which needs an offset per row and counts in int64); for callers that have loaded torch anyway.
    """
    rng = np.random.default_rng(seed)
    participants = rng.integers(0, n_participants, size=(BLOCK, n_participants), dtype=np.int32)[:size]
    n_stimuli = sum(len(g) for g in groups)
    largest = max(len(g) for g in groups)
    narrow = np.int8 if largest <= 127 else np.int64  # no count exceeds its stratum's size
    by_stimulus = np.empty((n_stimuli, size), dtype=narrow)
    if scatter:
        import torch

        ones = torch.ones((size, largest), dtype=torch.from_numpy(by_stimulus[:0]).dtype)
    for g in groups:
        n = len(g)
        if scatter:  # int64 draws: the same values as int32 ones below 2**32
            index = torch.from_numpy(rng.integers(0, n, size=(BLOCK, n), dtype=np.int64)[:size])
            by_row = torch.zeros((size, n), dtype=ones.dtype).scatter_add_(1, index, ones[:, :n])
            by_stimulus[g] = by_row.numpy().T
        else:
            local = rng.integers(0, n, size=(BLOCK, n), dtype=np.int32)[:size]
            local += np.arange(0, size * n, n, dtype=np.int32)[:, None]  # row * n + index: one bincount
            by_stimulus[g] = np.bincount(local.ravel(), minlength=size * n).reshape(size, n).T
    return by_stimulus, counts(participants, n_participants)


def iter_blocks(
    n_resamples: int, seed: int, n_participants: int, conditions: np.ndarray | Sequence[str]
) -> Iterator[Resamples]:
    """All resamples for ``seed``, block by block (reproducible for any chunking)."""
    groups = strata(conditions)
    for child, size in block_seeds(n_resamples, seed):
        yield draw_block(child, n_participants, groups, size)


def block_seeds(n_resamples: int, seed: int) -> list[tuple[np.random.SeedSequence, int]]:
    """Each block's generator seed and size: one ``SeedSequence`` child per ``BLOCK`` resamples, the last block
    short. Every way of drawing the resamples goes through this, so they are the same for any chunking."""
    children = np.random.SeedSequence(seed).spawn(-(-n_resamples // BLOCK))
    return [(child, min(BLOCK, n_resamples - b * BLOCK)) for b, child in enumerate(children)]


def counts(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, draws) indices -> (B, n) integer counts of each index per row."""
    B = indices.shape[0]
    dtype = np.int32 if B * n < 2**31 else np.int64
    flat = (np.arange(B, dtype=dtype)[:, None] * n + indices.astype(dtype, copy=False)).ravel()
    return np.bincount(flat, minlength=B * n).reshape(B, n)


class SufficientStatistics:
    """Per-stimulus sums over categories; ``evaluate`` turns count weights into mean correlations.

    The ceilings need each participant's covariance with a weighted sum of participants, for two
    weightings per resample. Two ways give it, and the cheaper one is used:

    - ``pairwise`` (few participants): a second table of per-stimulus cross-products of every pair
      of participants, so one matrix product yields each resample's S x S covariance: N S(S+1)/2
      multiply-adds per resample, in int8 digits (:class:`CountProduct`) with the first table.
    - pooled (many participants): the weighted pool of participants, per stimulus and category, then
      its product with every participant's ratings: two matrix products through the stimulus x
      category axis, 4 N K S multiply-adds per resample for the two weightings, no table.

    Pairwise is used while S + 1 <= 8 K, where it is the cheaper (at 30 participants and 10
    categories, 2.5x fewer operations); its table is then at most 4 times the ratings themselves,
    so memory stays linear in participants either way.
    """

    def __init__(
        self, human: np.ndarray, model: np.ndarray, ceilings: bool = True, include_copies: bool = False
    ) -> None:
        human = np.asarray(human, dtype=np.float64)
        model = np.asarray(model, dtype=np.float64)
        S, N, K = human.shape
        M = model.shape[0]
        self.S, self.N, self.M, self.K, self.ceilings, self.include_copies = S, N, M, K, ceilings, include_copies
        self.pairwise = ceilings and S + 1 <= 8 * K
        hs = human.transpose(1, 0, 2)  # (N, S, K)
        ms = model.transpose(1, 0, 2)  # (N, M, K)
        table = np.concatenate(
            [
                hs.sum(axis=2),
                np.einsum("nsk,nsk->ns", hs, hs),
                ms.sum(axis=2),
                np.einsum("nmk,nmk->nm", ms, ms),
                np.einsum("nsk,nmk->nsm", hs, ms).reshape(N, S * M),
            ],
            axis=1,
        )
        self.width = table.shape[1]
        self.flat = None  # (S, N*K) ratings for the pooled covariance products
        if self.pairwise:
            i, j = np.triu_indices(S)
            table = np.concatenate([table, np.einsum("nsk,ntk->nst", hs, hs)[:, i, j]], axis=1)  # + (N, S(S+1)/2)
            where = np.empty((S, S), dtype=np.intp)  # pairs column of every (s, t)
            where[i, j] = where[j, i] = np.arange(len(i))
            self.pair_columns = self.width + where.ravel()
        elif ceilings:
            self.flat = human.reshape(S, N * K)
        # int8 digits unless the pooled products run: those dominate the time there (float64, not integer
        # counts), and torch's libraries would add 0.5 GiB resident to an analysis that otherwise never loads them
        self.product: CountProduct | None = None if self.flat is not None else CountProduct(table)
        self.table = table
        # each statistic's rows in the transposed sums (slices where contiguous, as they are at paper scale)
        position = self.product.position if self.product is not None else np.arange(table.shape[1])
        self.rows = {
            name: _rows(position[start : start + size])
            for name, start, size in (
                ("sx", 0, S),
                ("sxx", S, S),
                ("sy", 2 * S, M),
                ("syy", 2 * S + M, M),
                ("sxy", 2 * S + 2 * M, S * M),
            )
        }
        if self.pairwise:
            import torch

            # row of the pair sum (s, t) for every s, for each t
            self.pair_index = [torch.from_numpy(c) for c in position[self.pair_columns].reshape(S, S).T.copy()]

    def sums(self, counts_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, B) integer counts, stimuli by rows -> (F, B) count-weighted sums of every table column, by rows
        (in the order of ``rows``), and (B,) total counts."""
        if self.product is not None:
            return self.product.transposed(counts_t)
        return (np.ascontiguousarray(counts_t.T) @ self.table).T, counts_t.sum(axis=0, dtype=np.int64)

    def chunk_bytes(self) -> int:
        """Bytes per resample of the widest array ``evaluate`` makes (bounds the chunk size)."""
        widest = [self.table.shape[1], self.N + self.S]
        if self.pairwise:
            widest.append(self.S * self.S)
        elif self.ceilings:
            widest.append(2 * self.N * self.K)
        digit_rows = self.product.table.shape[0] if self.product is not None else 0
        return max(8 * max(widest), 4 * digit_rows)  # float64 arrays, int32 digit sums

    def _raw_products(self, counts_t: np.ndarray, sums: np.ndarray, *weights: np.ndarray) -> list[np.ndarray]:
        """For each (B, S) participant weighting v: (B, S) count-weighted sum over stimuli and categories
        of every participant's ratings times sum_t v_t x_t (uncentred)."""
        B, j = counts_t.shape[1], len(weights)
        if self.pairwise:
            import torch

            # raw[s] = sum_t pairs[s, t] v_t, added t by t in fused multiply-adds: the order OpenBLAS's matmul of
            # the (B, S, S) pair sums by the (B, S, j) weightings adds them in (the same ceilings bit for bit on
            # 100,000 resamples; tested against exact arithmetic), reading the pair sums where they are instead of
            # gathering 7 MB per 1,000 resamples into (B, S, S)
            pairs = torch.from_numpy(sums)
            # (S, j, 1, B): weighting t of every participant, broadcast over s
            v = torch.from_numpy(np.stack(weights).astype(np.float64, copy=False).transpose(2, 0, 1).copy()[:, :, None])
            acc = torch.zeros((j, self.S, B), dtype=torch.float64)
            for v_t, index in zip(v, self.pair_index):
                acc.addcmul_(pairs.index_select(0, index), v_t)
            return [np.ascontiguousarray(r.T) for r in acc.numpy()]
        flat = self.flat
        assert flat is not None  # set whenever ceilings are computed without the pair table
        pooled = (np.concatenate(weights) @ flat).reshape(j, B, self.N, self.K) * counts_t.T[None, :, :, None]
        raw = (pooled.reshape(j * B, -1) @ flat.T).reshape(j, B, self.S)
        return list(raw)

    def evaluate(self, stimulus_counts: np.ndarray, participant_counts: np.ndarray) -> np.ndarray:
        """(B, N) and (B, S) count weights -> (B, M [+2]) mean r of each model [and both ceilings]."""
        counts_t = np.ascontiguousarray(integer_counts(stimulus_counts).T)
        return self.evaluate_transposed(counts_t, np.asarray(participant_counts))

    def evaluate_transposed(self, counts_t: np.ndarray, participant_counts: np.ndarray) -> np.ndarray:
        """:meth:`evaluate` for (N, B) stimulus counts, stimuli by rows, as :func:`draw_counts` gives them.

        The model columns are read by rows (resamples along the fast axis), as the int8 product gives them;
        the ceilings take the few (B, S) arrays they need transposed, and compute exactly as before."""
        S, M = self.S, self.M
        sums, count = self.sums(counts_t)
        B = sums.shape[1]
        W = self.K * count  # (B,)
        rows = self.rows
        sx_t, sxx_t, sy_t, syy_t = (sums[rows[name]] for name in ("sx", "sxx", "sy", "syy"))
        w_t = participant_counts.T
        var_h_t = sxx_t - sx_t * sx_t / W
        var_m_t = syy_t - sy_t * sy_t / W
        with np.errstate(invalid="ignore", divide="ignore"):
            # sum_s w_s r_sm = (sum_s a_s cov_sm) / sd_m with a_s = w_s / sd_s: one pass over (S, M, B), not six
            a_t = np.where(w_t > 0, w_t / np.sqrt(var_h_t), 0.0)
            a_sxy = np.einsum("sb,smb->mb", a_t, sums[rows["sxy"]].reshape(S, M, B))
            a_cov = a_sxy - np.einsum("sb,sb->b", a_t, sx_t) * sy_t / W
            out = [(a_cov / np.sqrt(var_m_t) / S).T]
        if self.ceilings:
            # (B, S) and C-ordered, as before: the same einsum and matmul summation order, the same numbers
            sx, var_h, a = (np.ascontiguousarray(x.T) for x in (sx_t, var_h_t, a_t))
            w = np.ascontiguousarray(participant_counts)
            present = w > 0
            Wc = W[:, None]
            with np.errstate(invalid="ignore", divide="ignore"):
                # covariance of each participant with the pool: raw products less the mean correction
                cw, ca = (
                    raw - sx * (np.einsum("bs,bs->b", v, sx)[:, None] / Wc)
                    for raw, v in zip(self._raw_products(counts_t, sums, w, a), (w, a))
                )
                wcw = np.einsum("bs,bs->b", cw, w)[:, None]
                own = np.ones_like(w) if self.include_copies else w  # copies of s removed from "others"
                r_lower = (cw - own * var_h) / np.sqrt(var_h * (wcw - 2 * own * cw + own * own * var_h))
                aca = np.einsum("bs,bs->b", ca, a)[:, None]
                r_upper = ca / np.sqrt(var_h * aca)
            for r_ceiling in (r_lower, r_upper):
                out.append((np.where(present, r_ceiling, 0.0) * w).sum(axis=1, keepdims=True) / S)
        return np.concatenate(out, axis=1)


def _rows(positions: np.ndarray) -> slice | np.ndarray:
    """Row positions as a slice (a view, no copy) when they are consecutive, else as they are."""
    if len(positions) and np.array_equal(positions, np.arange(positions[0], positions[0] + len(positions))):
        return slice(int(positions[0]), int(positions[0]) + len(positions))
    return positions


def bootstrap(
    human: np.ndarray,
    model: np.ndarray,
    model_names: Sequence[str],
    conditions: np.ndarray | Sequence[str],
    n_resamples: int = 100_000,
    seed: int = 0,
    chunk_size: int = 10_000,
    ceilings: bool = True,
    include_copies: bool = False,
    threads: int = 1,
) -> Distributions:
    """Distributions of every model's mean r (and both noise ceilings) over participant x stimulus resamples.

    The lower ceiling correlates each drawn participant with the mean of the others. A resample can
    draw a participant several times; by default (``include_copies=False``) the "others" exclude
    every copy of that participant, since a copy of oneself is not another participant and would
    inflate the bound. ``include_copies=True`` treats copies as others (the literal computation).
    ``threads`` chunks are evaluated at once; the numbers do not depend on it.
    """
    human = np.asarray(human, dtype=np.float64)
    S, N, _ = human.shape
    if len(conditions) != N:
        raise UserError(f"conditions has {len(conditions)} entries for {N} stimuli")
    stats = SufficientStatistics(human, model, ceilings, include_copies)
    estimates = stats.evaluate(np.ones((1, N)), np.ones((1, S)))[0]
    blocks_per_chunk = max(1, min(chunk_size, CHUNK_BYTES // stats.chunk_bytes()) // BLOCK)
    groups = strata(conditions)
    blocks = block_seeds(n_resamples, seed)

    def chunk(first: int) -> np.ndarray:
        drawn = [
            draw_counts(child, S, groups, size, stats.product is not None)
            for child, size in blocks[first : first + blocks_per_chunk]
        ]
        if len(drawn) == 1:
            return stats.evaluate_transposed(*drawn[0])
        stimulus_counts, participant_counts = zip(*drawn)
        return stats.evaluate_transposed(np.concatenate(stimulus_counts, axis=1), np.concatenate(participant_counts))

    firsts = range(0, len(blocks), blocks_per_chunk)
    if threads > 1:  # numpy and torch release the GIL in the heavy steps; the numbers are the same
        with ThreadPoolExecutor(threads) as pool:
            samples = list(pool.map(chunk, firsts))
    else:
        samples = [chunk(first) for first in firsts]
    names = tuple(model_names) + ((LOWER, UPPER) if ceilings else ())
    log.debug("bootstrap: %d resamples, %d participants, %d stimuli, %d strata", n_resamples, S, N, len(groups))
    return Distributions(names, estimates, np.concatenate(samples), seed)


def pooled_bootstrap(
    parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | Sequence[str]]],
    model_names: Sequence[str],
    n_resamples: int = 100_000,
    seed: int = 0,
    chunk_size: int = 10_000,
    include_copies: bool = False,
    threads: int = 1,
) -> Distributions:
    """Independent replications (or an adaptive study's batches), each ``(human, model, conditions)``, pooled.

    Each part is resampled on its own (participants, and stimuli within its condition strata; part i
    with ``seed + i``), so a pooled resample is the participant-weighted mean of the parts' resamples
    and the lower ceiling compares participants within their part. One part is :func:`bootstrap`.
    """
    dists = [
        bootstrap(
            human,
            model,
            model_names,
            conditions,
            n_resamples,
            seed + i,
            chunk_size,
            include_copies=include_copies,
            threads=threads,
        )
        for i, (human, model, conditions) in enumerate(parts)
    ]
    sizes = np.array([np.shape(human)[0] for human, _, _ in parts], dtype=np.float64)
    weights = sizes / sizes.sum()
    return Distributions(
        dists[0].names,
        sum(w * d.estimates for w, d in zip(weights, dists)),
        sum(w * d.samples for w, d in zip(weights, dists)),
        seed,
    )


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> np.ndarray:
    """(B, P) -> (P, 2) central percentile intervals (undefined resamples, NaN, are left out)."""
    tail = (1.0 - level) / 2.0
    return np.nanquantile(samples, [tail, 1.0 - tail], axis=0).T


def pairwise_tests(dist: Distributions, include: Sequence[str] | None = None, alpha: float = 0.05) -> PairwiseTests:
    """Two-tailed bootstrap p-values for every pair, Holm-Sidak corrected over all pairs.

    p = min(1, 2 min(P(d <= 0), P(d >= 0))) for d the resampled difference of mean r (ties count
    against significance, so identical entries never differ).
    """
    names = tuple(include) if include is not None else tuple(n for n in dist.names if n != UPPER)
    columns = [dist.names.index(n) for n in names]
    samples, estimates = dist.samples[:, columns], dist.estimates[columns]
    P = len(names)
    iu = np.triu_indices(P, k=1)
    p = np.full((P, P), np.nan)
    for i, j in zip(*iu):
        d = samples[:, i] - samples[:, j]
        d = d[np.isfinite(d)]
        p[i, j] = p[j, i] = min(1.0, 2.0 * min(np.mean(d <= 0), np.mean(d >= 0)))
    corrected = np.full((P, P), np.nan)
    significance = np.zeros((P, P), dtype=int)
    if len(iu[0]):
        with np.errstate(divide="ignore"):  # p = 1 makes statsmodels take log(0); the result is still 1
            reject, p_adj, _, _ = multipletests(p[iu], alpha=alpha, method="holm-sidak")
        corrected[iu] = corrected[iu[1], iu[0]] = p_adj
        sign = np.sign(estimates[iu[0]] - estimates[iu[1]]).astype(int) * reject
        significance[iu] = sign
        significance[iu[1], iu[0]] = -sign
    return PairwiseTests(names, p, corrected, significance, alpha)
