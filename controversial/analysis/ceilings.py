"""Noise ceilings: how well any model could predict the participants at best.

Lower bound: each participant against the mean of the *other* participants (leave one out).
Upper bound (Pearson only): each participant against the mean of all participants' z-scored
patterns, the prediction that maximises the across-participant mean Pearson r.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controversial.analysis.correlation import Measure, correlation_matrix
from controversial.errors import UserError


@dataclass(frozen=True)
class NoiseCeiling:
    lower: float
    upper: float  # NaN for rank measures, where the z-score construction is not the optimum
    lower_per_participant: np.ndarray  # (S,)
    upper_per_participant: np.ndarray  # (S,)


def _zscore(patterns: np.ndarray) -> np.ndarray:
    flat = patterns.reshape(patterns.shape[0], -1)
    return (flat - flat.mean(axis=1, keepdims=True)) / flat.std(axis=1, keepdims=True)


def noise_ceiling(human: np.ndarray, measure: Measure = "pearson") -> NoiseCeiling:
    """Both bounds with their per-participant values from (S, N, K) ratings (S >= 2)."""
    human = np.asarray(human, dtype=np.float64)
    S = human.shape[0]
    if S < 2:
        raise UserError("a noise ceiling needs at least two participants")
    total = human.sum(axis=0)
    lower = np.array(
        [correlation_matrix(human[s : s + 1], (total - human[s])[None] / (S - 1), measure)[0, 0] for s in range(S)]
    )
    if measure == "pearson":
        best = _zscore(human).mean(axis=0)
        upper = correlation_matrix(human, best[None], measure)[:, 0]
    else:
        upper = np.full(S, np.nan)
    return NoiseCeiling(float(lower.mean()), float(upper.mean()), lower, upper)
