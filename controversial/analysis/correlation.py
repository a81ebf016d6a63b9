"""Human-response prediction accuracy (PNAS Eq. 3) and its rank-based alternatives.

Each participant's ratings and each model's probabilities are flattened over all (stimulus,
category) entries and correlated; a model's score is the mean over participants.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import stats

from controversial.errors import UserError

Measure = Literal["pearson", "spearman", "kendall"]
MEASURES: tuple[Measure, ...] = ("pearson", "spearman", "kendall")


def _flat(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(x.shape[0], -1)


def pearson_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r between every row-pattern of ``a`` (A, ...) and of ``b`` (B, ...) -> (A, B)."""
    a, b = _flat(a), _flat(b)
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a @ b.T) / np.sqrt(np.outer((a * a).sum(axis=1), (b * b).sum(axis=1)))


def correlation_matrix(a: np.ndarray, b: np.ndarray, measure: Measure = "pearson") -> np.ndarray:
    """r between every pattern of ``a`` and of ``b`` under ``measure`` (Kendall is tau-b)."""
    if measure == "pearson":
        return pearson_matrix(a, b)
    if measure == "spearman":
        return pearson_matrix(stats.rankdata(_flat(a), axis=1), stats.rankdata(_flat(b), axis=1))
    if measure == "kendall":
        a, b = _flat(a), _flat(b)
        return np.array([[stats.kendalltau(x, y, variant="b").statistic for y in b] for x in a])
    raise UserError(f"unknown measure {measure!r}; allowed: {', '.join(MEASURES)}")


def participant_model_correlations(human: np.ndarray, model: np.ndarray, measure: Measure = "pearson") -> np.ndarray:
    """(S, N, K) ratings and (M, N, K) probabilities -> (S, M) per-participant accuracies."""
    return correlation_matrix(human, model, measure)
