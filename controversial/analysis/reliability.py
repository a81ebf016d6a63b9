"""How reliable the human ratings are (METHODS.md section 8): test-retest on the repeated presentations, and
split-half reliability of the group mean with the Spearman-Brown correction.

Test-retest: per participant, Pearson r between the first and the second presentation of each repeated image,
over all its categories' ratings; the median and distribution over participants, and the r of every pair
pooled. Split-half: participants split at random into two halves, the halves' mean ratings over stimuli x
categories correlated, ``r_full = 2 r / (1 + r)``; the mean and a percentile interval over many seeded splits.
It says how well the group mean would replicate with another sample of as many people (compare the upper
noise ceiling).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from controversial.analysis.results import ReliabilityResult, SplitHalfResult, TestRetestResult
from controversial.analysis.study import Study
from controversial.options import Count, Options

if TYPE_CHECKING:
    from controversial.analysis.options import AnalysisOptions


class ReliabilityOptions(Options):
    n_splits: Count = Field(1000, description="random participant splits of the split-half reliability")


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def retest_reliability(
    retest: Mapping[str, tuple[np.ndarray, np.ndarray]], participants: Sequence[str], n_categories: int
) -> TestRetestResult:
    """Per participant (those analysed, with repeats), r between first and second presentations (``retest``:
    the ratings of every repeated image's ``n_categories`` categories); NaN where either is constant."""
    kept = [p for p in participants if p in retest and len(retest[p][0])]
    per = {p: _pearson(*retest[p]) for p in kept}
    values = np.array([v for v in per.values() if np.isfinite(v)])
    first = np.concatenate([retest[p][0] for p in kept]) if kept else np.zeros(0)
    second = np.concatenate([retest[p][1] for p in kept]) if kept else np.zeros(0)
    return TestRetestResult(
        n_participants=len(kept),
        n_repeated_images=int(np.median([len(retest[p][0]) for p in kept])) // n_categories if kept else 0,
        per_participant=per,
        median=float(np.median(values)) if len(values) else float("nan"),
        quartiles=[float(q) for q in np.percentile(values, [25, 75])] if len(values) else [float("nan")] * 2,
        pooled=_pearson(first, second),
    )


def split_half(human: np.ndarray, n_splits: int, seed: int, ci_level: float) -> SplitHalfResult:
    """Spearman-Brown corrected split-half r of ``human`` (participants, stimuli, categories) over seeded splits."""
    n = human.shape[0]
    if n < 2:
        return SplitHalfResult(n, 0, float("nan"), float("nan"), float("nan"), ci_level)
    patterns = human.reshape(n, -1)
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((n_splits, n)), axis=1)  # a random permutation per split
    half = np.zeros((n_splits, n), bool)
    np.put_along_axis(half, order[:, : n // 2], True, axis=1)
    mean_a = (half @ patterns) / half.sum(1, keepdims=True)
    mean_b = (~half @ patterns) / (~half).sum(1, keepdims=True)
    a = mean_a - mean_a.mean(1, keepdims=True)
    b = mean_b - mean_b.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
        full = 2 * r / (1 + r)
    tail = 100 * (1 - ci_level) / 2
    low, high = np.nanpercentile(full, [tail, 100 - tail]) if np.isfinite(full).any() else (np.nan, np.nan)
    mean = float(np.nanmean(full)) if np.isfinite(full).any() else float("nan")
    return SplitHalfResult(n, n_splits, mean, float(low), float(high), ci_level)


def reliability(study: Study, options: AnalysisOptions) -> ReliabilityResult:
    """Both reliabilities of one study's analysed participants; test-retest only where images were repeated."""
    retest = retest_reliability(study.retest, study.participants, len(study.categories)) if study.retest else None
    n_splits, ci_level = options.reliability.n_splits, options.bootstrap.ci_level
    return ReliabilityResult(retest, split_half(study.human, n_splits, options.seed, ci_level))
