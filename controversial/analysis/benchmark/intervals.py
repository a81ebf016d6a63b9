"""Confidence intervals of the benchmark's overall table: a bootstrap over each dataset's human observers.

Every number of the table is a mean over a dataset's humans (a model's A, O and E against each human; the
baseline's, each human against the others), so the humans are what a repeat of the study would draw anew. Each
resample draws, per dataset, as many humans as it has with replacement (count weights), recomputes every row's
values from the stored pair matrices, and averages over the datasets of the table. A drawn human is never its
own partner. A model's OOD accuracy involves no human and keeps a zero-width interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from controversial.analysis.benchmark.scores import BenchmarkRow, DatasetBenchmark

PAIR_METRICS = ("accuracy_difference", "observed_consistency", "error_consistency")


def _weighted_mean(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per resample (rows of ``weights``), the weighted mean of each column of ``values`` (H, X), NaN skipped."""
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ np.where(finite, values, 0.0)) / (weights @ finite)


def _dataset_draws(block: DatasetBenchmark, models: Sequence[str], weights: np.ndarray) -> dict[str, np.ndarray]:
    """``metric -> (R, models + 1)``: each model's value and the human baseline (last column) per resample."""
    humans = np.flatnonzero(block.is_human)
    rows = np.array([block.names.index(m) for m in models], dtype=int)
    pairs = {
        "accuracy_difference": block.accuracy_difference_pairs,
        "observed_consistency": block.observed_consistency_pairs,
        "error_consistency": block.kappa,
    }
    draws = {}
    for metric, matrix in pairs.items():
        pair = np.asarray(matrix, dtype=float)
        of_models = _weighted_mean(weights, pair[np.ix_(rows, humans)].T)  # (R, models)
        among = pair[np.ix_(humans, humans)].copy()
        np.fill_diagonal(among, np.nan)  # a human is not their own partner
        partner = _weighted_mean(weights, among.T)  # (R, H): each human against the drawn others
        finite = np.isfinite(partner)
        with np.errstate(invalid="ignore", divide="ignore"):
            baseline = np.where(finite, weights * partner, 0).sum(1) / np.where(finite, weights, 0).sum(1)
        draws[metric] = np.column_stack([of_models, baseline])
    accuracy = np.asarray(block.ood_accuracy, dtype=float)
    fixed = np.tile(accuracy[rows], (len(weights), 1))
    draws["ood_accuracy"] = np.column_stack([fixed, weights @ accuracy[humans] / weights.sum(1)])
    return draws


def observer_bootstrap(
    blocks: Sequence[DatasetBenchmark], models: Sequence[str], n_resamples: int, seed: int, level: float
) -> dict[str, np.ndarray]:
    """``metric -> (2, models + 1)``: percentile interval of each model's and the baseline's mean over ``blocks``."""
    rng = np.random.default_rng(seed)
    totals: dict[str, np.ndarray] = {}
    for block in blocks:
        n_humans = int(np.sum(block.is_human))
        weights = rng.multinomial(n_humans, np.full(n_humans, 1 / n_humans), size=n_resamples).astype(float)
        for metric, values in _dataset_draws(block, models, weights).items():
            totals[metric] = totals.get(metric, 0) + values / len(blocks)
    tail = 100 * (1 - level) / 2
    with np.errstate(invalid="ignore"):
        return {m: np.nanpercentile(v, [tail, 100 - tail], axis=0) for m, v in totals.items()}


def with_intervals(
    rows: Sequence[BenchmarkRow],
    blocks: Sequence[DatasetBenchmark],
    n_resamples: int,
    seed: int,
    level: float,
    baseline: str = "humans (mean)",
) -> list[BenchmarkRow]:
    """The overall table's rows with ``ci`` set: metric -> [low, high] at ``level``."""
    models = [r.name for r in rows if r.name != baseline]
    bounds = observer_bootstrap(blocks, models, n_resamples, seed, level)
    column = {name: i for i, name in enumerate(models)} | {baseline: len(models)}
    return [
        replace(r, ci={m: [float(b[0, column[r.name]]), float(b[1, column[r.name]])] for m, b in bounds.items()})
        for r in rows
    ]
