"""Is a difference in error consistency real? Bootstrap CIs of each model's mean kappa with the humans of a
dataset, a paired bootstrap test between two models, and the power of that test.

The procedure follows Klein, Meyen, Brendel, Wichmann & Meding (NeurIPS 2025, "Quantifying uncertainty in error
consistency"; their ``geirhos_analysis/bootstrap_models.py``): trials are resampled with replacement *within each
condition*, the same resampled trials for every observer (so the pairing of decisions, which kappa measures, is
kept), kappa is computed per (model, human, condition), averaged over conditions and then over the humans -- the
benchmark's E on that dataset -- and the two models of a pair are compared on the *same* resamples, so the test
is paired; CIs and p-values are percentile-bootstrap ones (``observers="fixed"``: about *these* humans). With
``observers="random"`` the humans count as a sample of people (would the difference hold for new people?): the
variance adds the spread between the per-human values beyond their own trial noise (``random_observer_variance``)
and CIs and p-values are normal-theory.

Assumptions: trials are exchangeable within a condition (no order or learning effects), observers answer
independently of each other, and the bootstrap distribution of the difference approximates its sampling
distribution (many trials per condition); ``random`` also assumes the per-human values are roughly normal.
``benchmarks/kappa_test.py`` checks the false-positive rate on simulated independent observers and draws the
power curve.

Each resample is a count weight per trial, so all (model, human) pairs of one resample are one matrix product.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from controversial.analysis.error_consistency import CExpOne, DecisionData, consistency_from_counts
from controversial.errors import UserError

Observers = Literal["fixed", "random"]


@dataclass(frozen=True)
class PairTest:
    """Paired bootstrap test of E(a) - E(b) on one dataset; ``p_holm`` corrects over the dataset's pairs."""

    a: str
    b: str
    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    significant: bool  # p_holm < alpha


@dataclass(frozen=True)
class KappaInference:
    """Bootstrap CIs of each model's mean kappa with the humans, and the paired tests between models."""

    dataset: str
    models: list[str]
    humans: list[str]
    n_resamples: int
    observers: str  # fixed: these humans; random: humans as a sample of people
    level: float
    alpha: float
    estimate: list[float]
    ci_low: list[float]
    ci_high: list[float]
    pairs: list[PairTest]


def trial_weights(conditions: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(B, T) counts: each condition's trials drawn with replacement, as many as it has."""
    weights = np.zeros((n_resamples, len(conditions)), dtype=np.float64)
    for condition in np.unique(conditions):
        index = np.flatnonzero(conditions == condition)
        weights[:, index] = rng.multinomial(len(index), np.full(len(index), 1 / len(index)), size=n_resamples)
    return weights


def model_human_kappa(
    models: np.ndarray,
    humans: np.ndarray,
    conditions: np.ndarray,
    weights: np.ndarray,
    c_exp_one: CExpOne = "nan",
    available: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """(B, M, H) kappa per (model, human), averaged over conditions, for each row of trial ``weights`` (B, T).

    ``models`` (M, T) and ``humans`` (H, T) are correct/incorrect; ``available`` their masks (default: every
    trial seen). Counts over the trials both saw are weighted sums, so a resample is a matrix product."""
    am, ah = available or (np.ones(models.shape, bool), np.ones(humans.shape, bool))
    xm, xh = (models & am).astype(np.float64), (humans & ah).astype(np.float64)
    fm, fh = am.astype(np.float64), ah.astype(np.float64)
    M, H = len(models), len(humans)
    per = []
    for condition in np.unique(conditions):
        cols = conditions == condition
        w = weights[:, cols]

        def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            pairs = (a[:, None, cols] * b[None, :, cols]).reshape(M * H, -1)
            return (w @ pairs.T).reshape(-1, M, H)

        n, n_m, n_h, n11 = product(fm, fh), product(xm, fh), product(fm, xh), product(xm, xh)
        per.append(consistency_from_counts(n, n_m, n_h, n11, c_exp_one)[2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.stack(per), axis=0)


def _human_mean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis (humans), NaN pairs left out, quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=-1)


def bootstrap_pair_kappa(
    models: np.ndarray,
    humans: np.ndarray,
    conditions: np.ndarray,
    n_resamples: int,
    seed: int | np.random.Generator = 0,
    c_exp_one: CExpOne = "nan",
    available: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(M, H) kappa of every (model, human) pair, averaged over conditions, and (B, M, H) its resamples (trials
    drawn within conditions, the same draw for every observer)."""
    rng = np.random.default_rng(seed)
    point = model_human_kappa(models, humans, conditions, np.ones((1, len(conditions))), c_exp_one, available)[0]
    weights = trial_weights(conditions, n_resamples, rng)
    return point, model_human_kappa(models, humans, conditions, weights, c_exp_one, available)


def random_observer_variance(point: np.ndarray, samples: np.ndarray) -> float:
    """Variance of a mean over humans (``point`` (H,), trial resamples ``samples`` (B, H)) when the humans are a
    sample of people: the trial-bootstrap variance of the mean plus the spread of the per-human values beyond
    their own trial noise (the between-people component of a crossed design), never below the trial variance.

    Resampling trials and observers together would count each person's trial noise twice (it is in the spread
    between people as well): that test rejected 0.2% of null datasets at alpha 0.05 (benchmarks/kappa_test.py)."""
    ok = np.isfinite(point)
    h = int(ok.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        trial = float(np.nanvar(np.nanmean(samples[:, ok], axis=1), ddof=1))
        if h < 2:
            return trial
        between = float(np.var(point[ok], ddof=1)) / h
        own_noise = float(np.nanmean(np.nanvar(samples[:, ok], axis=0, ddof=1))) / h
    return max(trial, trial + between - own_noise)


def interval_and_p(
    point: np.ndarray, samples: np.ndarray, observers: Observers, level: float
) -> tuple[float, float, float, float]:
    """(estimate, CI low, CI high, two-sided p of 0) of the mean over humans of ``point`` (H,) with trial
    resamples ``samples`` (B, H). ``fixed`` humans: percentile bootstrap; ``random``: normal theory with
    ``random_observer_variance``."""
    estimate = float(_human_mean(point))
    means = _human_mean(samples)
    if observers == "fixed":
        tail = 100 * (1 - level) / 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            low, high = np.nanpercentile(means, [tail, 100 - tail])
        return estimate, float(low), float(high), paired_p_value(means)
    if observers != "random":
        raise UserError(f"unknown observers {observers!r}; allowed: fixed, random")
    se = np.sqrt(random_observer_variance(point, samples))
    z = stats.norm.ppf(0.5 + level / 2)
    p = float(2 * stats.norm.sf(abs(estimate) / se)) if se > 0 else float("nan")
    return estimate, estimate - z * se, estimate + z * se, p


def paired_p_value(differences: np.ndarray) -> float:
    """Two-sided percentile-bootstrap p-value of a difference being 0: twice the smaller tail beyond 0,
    counted with the add-one rule so it is never 0 (finite resamples only)."""
    d = differences[np.isfinite(differences)]
    if not len(d):
        return float("nan")
    low = (np.sum(d <= 0) + 1) / (len(d) + 1)
    high = (np.sum(d >= 0) + 1) / (len(d) + 1)
    return float(min(1.0, 2 * min(low, high)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (family-wise error), monotone, NaN kept."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite])]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[i]))
        out[i] = running
    return out.tolist()


def infer_dataset(
    dataset: str,
    data: DecisionData,
    is_human: Sequence[bool],
    conditions: Sequence[str],
    n_resamples: int,
    seed: int = 0,
    observers: Observers = "fixed",
    level: float = 0.95,
    alpha: float = 0.05,
    c_exp_one: CExpOne = "nan",
) -> KappaInference | None:
    """CIs and paired tests for the models of one dataset over the given (benchmark) conditions; None when the
    dataset has no model."""
    human = np.asarray(is_human, bool)
    if human.all():
        return None
    cols = np.isin(data.conditions, list(conditions))
    correct, seen = data.correct[:, cols], data.available[:, cols]
    point, samples = bootstrap_pair_kappa(
        correct[~human],
        correct[human],
        data.conditions[cols],
        n_resamples,
        seed,
        c_exp_one,
        (seen[~human], seen[human]),
    )
    names = [n for n, h in zip(data.names, human) if not h]
    means = [interval_and_p(point[m], samples[:, m], observers, level) for m in range(len(names))]
    raw = []
    for i, j in ((i, j) for i in range(len(names)) for j in range(i + 1, len(names))):
        test = interval_and_p(point[i] - point[j], samples[:, i] - samples[:, j], observers, level)
        raw.append((names[i], names[j], *test))
    adjusted = holm([r[5] for r in raw])
    pairs = [PairTest(*r, p_holm=q, significant=bool(q < alpha)) for r, q in zip(raw, adjusted)]
    return KappaInference(
        dataset=dataset,
        models=names,
        humans=[n for n, h in zip(data.names, human) if h],
        n_resamples=n_resamples,
        observers=observers,
        level=level,
        alpha=alpha,
        estimate=[m[0] for m in means],
        ci_low=[m[1] for m in means],
        ci_high=[m[2] for m in means],
        pairs=pairs,
    )


# --- simulation: the false-positive rate and the power of the paired test ---


def copy_observers(
    n_trials: int, accuracy: float | np.ndarray, copy: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """(O, T) correct/incorrect of observers who each copy a shared per-trial outcome z_t ~ Bernoulli(p) with
    probability ``copy[o]`` and otherwise answer independently with the same accuracy p (``accuracy`` per trial
    or scalar). Two such observers agree beyond chance only when both copy, so their true kappa is
    ``copy[i] * copy[j]``; ``copy = 0`` gives independent observers."""
    p = np.broadcast_to(np.asarray(accuracy, dtype=float), (n_trials,))
    shared = rng.random(n_trials) < p
    own = rng.random((len(copy), n_trials)) < p
    copies = rng.random((len(copy), n_trials)) < np.asarray(copy, dtype=float)[:, None]
    return np.where(copies, shared, own)


def paired_test_rejects(
    models: np.ndarray,
    humans: np.ndarray,
    conditions: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator,
    alpha: float = 0.05,
    observers: Observers = "fixed",
) -> bool:
    """Whether the paired test finds the two models' mean kappa with the humans different at ``alpha``."""
    point, samples = bootstrap_pair_kappa(models, humans, conditions, n_resamples, rng)
    p = interval_and_p(point[0] - point[1], samples[:, 0] - samples[:, 1], observers, 1 - alpha)[3]
    return p < alpha


def power(
    n_trials: int,
    kappa_a: float,
    kappa_b: float,
    human_kappa: float,
    n_humans: int,
    accuracy: float,
    n_datasets: int,
    n_resamples: int,
    seed: int = 0,
    alpha: float = 0.05,
) -> float:
    """The fraction of simulated datasets (one condition of ``n_trials``) in which the paired test rejects, for
    two models whose true kappa with every human is ``kappa_a`` and ``kappa_b`` and humans whose mutual kappa is
    ``human_kappa`` (``copy_observers``: copy rates sqrt(human_kappa) for humans, kappa / that for models)."""
    c_h = np.sqrt(human_kappa)
    copy = np.array([kappa_a / c_h, kappa_b / c_h] + [c_h] * n_humans)
    if copy.max() > 1:
        raise UserError(f"kappa_a, kappa_b must not exceed sqrt(human_kappa) = {c_h:.3f} in this observer model")
    rng = np.random.default_rng(seed)
    conditions = np.zeros(n_trials, dtype=int)
    hits = 0
    for _ in range(n_datasets):
        correct = copy_observers(n_trials, accuracy, copy, rng)
        hits += paired_test_rejects(correct[:2], correct[2:], conditions, n_resamples, rng, alpha)
    return hits / n_datasets
