"""Participant x stimulus bootstrap of model accuracies and noise ceilings, vectorised.

Resampling stimuli with replacement (stratified by condition) is the same as giving each
stimulus an integer count weight, and every weighted Pearson statistic is linear in those weights.
So one matrix product, count weights (resamples x stimuli) @ per-stimulus sufficient statistics
(sums, squares and cross-products over categories, for participants and models), yields every
model correlation for a chunk of resamples. Participant resampling is a second count vector
applied to the per-participant correlations; the ceilings need each participant's covariance with
a weighted pool of participants, from a table of participant pairs while participants are few and
from the pool itself when they are many (see :class:`SufficientStatistics`), so memory grows
linearly with participants, stimuli and models.

Resamples are drawn in fixed blocks of ``BLOCK`` with one ``SeedSequence`` child per block, so the
distribution depends only on the seed, never on the chunk size used to bound memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests

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


def iter_blocks(
    n_resamples: int, seed: int, n_participants: int, conditions: np.ndarray | Sequence[str]
) -> Iterator[Resamples]:
    """All resamples for ``seed``, block by block (reproducible for any chunking)."""
    groups = strata(conditions)
    children = np.random.SeedSequence(seed).spawn(-(-n_resamples // BLOCK))
    for b, child in enumerate(children):
        yield draw_block(child, n_participants, groups, min(BLOCK, n_resamples - b * BLOCK))


def counts(indices: np.ndarray, n: int) -> np.ndarray:
    """(B, draws) indices -> (B, n) float counts of each index per row."""
    B = indices.shape[0]
    dtype = np.int32 if B * n < 2**31 else np.int64
    flat = (np.arange(B, dtype=dtype)[:, None] * n + indices.astype(dtype, copy=False)).ravel()
    return np.bincount(flat, minlength=B * n).reshape(B, n).astype(np.float64)


def float32_unit(table: np.ndarray) -> float | None:
    """The power of two of which every entry of ``table`` is a multiple, or None (none down to 2**-40).

    Ratings on a scale like 0, .25, .5, .75, 1 make products that are multiples of 1/16, and integer
    counts times such a table sum exactly in float32 (in any order) while the sums stay below 2**24
    units: the same numbers as in float64, at twice the speed.
    """
    for e in range(41):
        scaled = table * 2.0**e
        if np.array_equal(scaled, np.rint(scaled)):
            return 2.0**-e
    return None


class SufficientStatistics:
    """Per-stimulus sums over categories; ``evaluate`` turns count weights into mean correlations.

    The ceilings need each participant's covariance with a weighted sum of participants, for two
    weightings per resample. Two ways give it, and the cheaper one is used:

    - ``pairwise`` (few participants): a second table of per-stimulus cross-products of every pair
      of participants, so one matrix product yields each resample's S x S covariance: N S(S+1)/2
      multiply-adds per resample. When the ratings lie on a grid (the five-point scale does) that
      product runs exactly in float32 (:func:`float32_unit`).
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
        self.table = np.concatenate(
            [
                hs.sum(axis=2),
                np.einsum("nsk,nsk->ns", hs, hs),
                ms.sum(axis=2),
                np.einsum("nmk,nmk->nm", ms, ms),
                np.einsum("nsk,nmk->nsm", hs, ms).reshape(N, S * M),
            ],
            axis=1,
        )
        self.flat = None  # (S, N*K) ratings for the pooled covariance products
        if self.pairwise:
            i, j = np.triu_indices(S)
            pairs = np.einsum("nsk,ntk->nst", hs, hs)[:, i, j]  # (N, S(S+1)/2)
            unit = float32_unit(pairs)
            # count-weighted sums are exact in float32 while (total count) x this stays below 2**24
            self.float32_scale = np.abs(pairs).max() / unit if unit else None
            exact = self.float32_scale is not None and self.float32_scale < 2**24
            self.pairs = pairs.astype(np.float32) if exact else pairs
            where = np.empty((S, S), dtype=np.intp)  # pairs column of every (s, t)
            where[i, j] = where[j, i] = np.arange(len(i))
            self.pair_columns = where.ravel()
        elif ceilings:
            self.flat = human.reshape(S, N * K)

    def chunk_bytes(self) -> int:
        """Bytes per resample of the widest array ``evaluate`` makes (bounds the chunk size)."""
        widest = [self.table.shape[1], self.N + self.S]
        if self.pairwise:
            widest.append(self.S * self.S)
        elif self.ceilings:
            widest.append(2 * self.N * self.K)
        return 8 * max(widest)

    def _pair_products(self, stimulus_counts: np.ndarray) -> np.ndarray:
        """(B, N) counts -> (B, S, S) count-weighted cross-products of every pair of participants."""
        B = stimulus_counts.shape[0]
        exact = (
            self.pairs.dtype == np.float32
            and stimulus_counts.sum(axis=1).max() * self.float32_scale < 2**24
            and np.array_equal(stimulus_counts, np.rint(stimulus_counts))
        )
        if exact:
            products = stimulus_counts.astype(np.float32) @ self.pairs
        else:
            products = stimulus_counts @ self.pairs.astype(np.float64)
        return products[:, self.pair_columns].reshape(B, self.S, self.S).astype(np.float64, copy=False)

    def _raw_products(self, stimulus_counts: np.ndarray, *weights: np.ndarray) -> list[np.ndarray]:
        """For each (B, S) participant weighting v: (B, S) count-weighted sum over stimuli and categories
        of every participant's ratings times sum_t v_t x_t (uncentred)."""
        B, j = stimulus_counts.shape[0], len(weights)
        if self.pairwise:
            raw = np.matmul(self._pair_products(stimulus_counts), np.stack(weights, axis=2))
            return [raw[:, :, i] for i in range(j)]
        flat = self.flat
        assert flat is not None  # set whenever ceilings are computed without the pair table
        pooled = (np.concatenate(weights) @ flat).reshape(j, B, self.N, self.K) * stimulus_counts[None, :, :, None]
        raw = (pooled.reshape(j * B, -1) @ flat.T).reshape(j, B, self.S)
        return list(raw)

    def evaluate(self, stimulus_counts: np.ndarray, participant_counts: np.ndarray) -> np.ndarray:
        """(B, N) and (B, S) count weights -> (B, M [+2]) mean r of each model [and both ceilings]."""
        S, M = self.S, self.M
        products = stimulus_counts @ self.table
        B = products.shape[0]
        W = self.K * stimulus_counts.sum(axis=1)[:, None]
        sx, sxx, y = products[:, :S], products[:, S : 2 * S], products[:, 2 * S :]
        sy, syy, sxy = y[:, :M], y[:, M : 2 * M], y[:, 2 * M :].reshape(B, S, M)
        var_h = sxx - sx * sx / W
        w = participant_counts
        present = w > 0
        cov_m = sxy - sx[:, :, None] * sy[:, None, :] / W[:, :, None]
        var_m = syy - sy * sy / W
        with np.errstate(invalid="ignore", divide="ignore"):
            r = cov_m / np.sqrt(var_h[:, :, None] * var_m[:, None, :])
        r = np.where(present[:, :, None], r, 0.0)
        out = [np.einsum("bs,bsm->bm", w, r) / S]
        if self.ceilings:
            with np.errstate(invalid="ignore", divide="ignore"):
                a = np.where(present, w / np.sqrt(var_h), 0.0)
                # covariance of each participant with the pool: raw products less the mean correction
                cw, ca = (
                    raw - sx * (np.einsum("bs,bs->b", v, sx)[:, None] / W)
                    for raw, v in zip(self._raw_products(stimulus_counts, w, a), (w, a))
                )
                wcw = np.einsum("bs,bs->b", cw, w)[:, None]
                own = np.ones_like(w) if self.include_copies else w  # copies of s removed from "others"
                r_lower = (cw - own * var_h) / np.sqrt(var_h * (wcw - 2 * own * cw + own * own * var_h))
                aca = np.einsum("bs,bs->b", ca, a)[:, None]
                r_upper = ca / np.sqrt(var_h * aca)
            for r_ceiling in (r_lower, r_upper):
                out.append((np.where(present, r_ceiling, 0.0) * w).sum(axis=1, keepdims=True) / S)
        return np.concatenate(out, axis=1)


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
) -> Distributions:
    """Distributions of every model's mean r (and both noise ceilings) over participant x stimulus resamples.

    The lower ceiling correlates each drawn participant with the mean of the others. A resample can
    draw a participant several times; by default (``include_copies=False``) the "others" exclude
    every copy of that participant, since a copy of oneself is not another participant and would
    inflate the bound. ``include_copies=True`` treats copies as others (the literal computation).
    """
    human = np.asarray(human, dtype=np.float64)
    S, N, _ = human.shape
    if len(conditions) != N:
        raise UserError(f"conditions has {len(conditions)} entries for {N} stimuli")
    stats = SufficientStatistics(human, model, ceilings, include_copies)
    estimates = stats.evaluate(np.ones((1, N)), np.ones((1, S)))[0]
    blocks_per_chunk = max(1, min(chunk_size, CHUNK_BYTES // stats.chunk_bytes()) // BLOCK)
    samples: list[np.ndarray] = []
    pending: list[tuple[np.ndarray, np.ndarray]] = []  # (stimulus counts, participant counts) per block

    def flush() -> None:
        if pending:
            stimulus_counts, participant_counts = (np.concatenate(c) for c in zip(*pending))
            samples.append(stats.evaluate(stimulus_counts, participant_counts))
            pending.clear()

    for block in iter_blocks(n_resamples, seed, S, conditions):
        pending.append((counts(block.stimuli, N), counts(block.participants, S)))
        if len(pending) == blocks_per_chunk:
            flush()
    flush()
    names = tuple(model_names) + ((LOWER, UPPER) if ceilings else ())
    log.debug(
        "bootstrap: %d resamples, %d participants, %d stimuli, %d strata", n_resamples, S, N, len(strata(conditions))
    )
    return Distributions(names, estimates, np.concatenate(samples), seed)


def pooled_bootstrap(
    parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray | Sequence[str]]],
    model_names: Sequence[str],
    n_resamples: int = 100_000,
    seed: int = 0,
    chunk_size: int = 10_000,
    include_copies: bool = False,
) -> Distributions:
    """Independent replications (or an adaptive study's batches), each ``(human, model, conditions)``, pooled.

    Each part is resampled on its own (participants, and stimuli within its condition strata; part i
    with ``seed + i``), so a pooled resample is the participant-weighted mean of the parts' resamples
    and the lower ceiling compares participants within their part. One part is :func:`bootstrap`.
    """
    dists = [
        bootstrap(
            human, model, model_names, conditions, n_resamples, seed + i, chunk_size, include_copies=include_copies
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
