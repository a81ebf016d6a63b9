"""Error consistency (Geirhos, Meding & Wichmann 2020): do two decision makers err on the same trials?

Everything works on a (decision makers x trials) matrix of correct/incorrect plus an availability
mask (a decision maker may not have seen every trial; a missed response is *incorrect*, not
unavailable). All-pairs statistics are matrix products, so they scale to hundreds of decision
makers and tens of thousands of trials; trial-bootstrap resamples are count weights.

Conventions, all explicit arguments: ``c_exp_one`` says what kappa is when c_exp = 1 (both
observers always right or always wrong: 0/0) -- ``"nan"`` (undefined, the later analyses) or
``"one"`` (the model-vs-human toolbox, which returns 1 whenever c_obs = 1).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import numpy as np
from scipy import stats

from controversial.errors import UserError
from controversial.records.choices import Trial
from controversial.records.csvfile import InputError

CExpOne = Literal["nan", "one"]
Aggregation = Literal["whole", "per_condition"]


@dataclass(frozen=True)
class DecisionData:
    """Correct/incorrect per decision maker and trial, with the trial conditions."""

    names: tuple[str, ...]
    images: tuple[str, ...]
    conditions: np.ndarray  # (T,) condition label per trial
    correct: np.ndarray  # (D, T) bool
    available: np.ndarray  # (D, T) bool: the decision maker saw the trial


@dataclass(frozen=True)
class Consistency:
    """All-pairs error consistency; matrices are (D, D), NaN where a pair shares no trial."""

    names: tuple[str, ...]
    n: np.ndarray
    accuracy: np.ndarray  # (D,) over each decision maker's own trials
    c_obs: np.ndarray
    c_exp: np.ndarray
    kappa: np.ndarray
    kappa_unbiased: np.ndarray  # n kappa / ((n - 1) + kappa), per condition before averaging


@dataclass(frozen=True)
class NullBand:
    """Central band of c_obs and kappa for independent binomial observers, per c_exp bin."""

    n_trials: int
    bin_edges: np.ndarray  # (n_bins + 1,)
    c_obs: np.ndarray  # (n_bins, 2)
    kappa: np.ndarray  # (n_bins, 2)
    level: float


def c_exp(p_i: np.ndarray, p_j: np.ndarray) -> np.ndarray:
    """Agreement expected from the accuracies alone: p_i p_j + (1 - p_i)(1 - p_j)."""
    p_i, p_j = np.asarray(p_i, dtype=float), np.asarray(p_j, dtype=float)
    return p_i * p_j + (1 - p_i) * (1 - p_j)


def c_obs(correct_i: np.ndarray, correct_j: np.ndarray) -> float:
    """Fraction of trials on which both are right or both are wrong."""
    return float(np.mean(np.asarray(correct_i, bool) == np.asarray(correct_j, bool)))


def kappa(observed: np.ndarray, expected: np.ndarray, c_exp_one: CExpOne = "nan") -> np.ndarray:
    """Cohen's kappa (c_obs - c_exp) / (1 - c_exp), with the c_exp = 1 case decided by ``c_exp_one``."""
    if c_exp_one not in ("nan", "one"):
        raise UserError(f"unknown c_exp_one {c_exp_one!r}; allowed: nan, one")
    observed, expected = np.asarray(observed, dtype=float), np.asarray(expected, dtype=float)
    degenerate = np.isclose(expected, 1.0, rtol=0, atol=1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = (observed - expected) / (1.0 - expected)
    return np.where(degenerate, 1.0 if c_exp_one == "one" else np.nan, value)


def unbiased_kappa(value: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """Small-sample correction n kappa / ((n - 1) + kappa)."""
    value = np.asarray(value, dtype=float)
    return n * value / ((np.asarray(n) - 1) + value)


def kappa_bounds(expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest kappa attainable at a given c_exp (Geirhos et al. Eqs. 5-6)."""
    e = np.asarray(expected, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(e <= 0.5, -e / (1 - e), (np.sqrt(np.clip(2 * e - 1, 0, None)) - e) / (1 - e))
        high = np.where(e <= 0.5, (1 - np.sqrt(np.clip(1 - 2 * e, 0, None)) - e) / (1 - e), 1.0)
    return low, high


def c_obs_bounds(p_i: np.ndarray, p_j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """|p_i + p_j - 1| <= c_obs <= 1 - |p_i - p_j|: the overlap two accuracies allow."""
    p_i, p_j = np.asarray(p_i, dtype=float), np.asarray(p_j, dtype=float)
    return np.abs(p_i + p_j - 1), 1 - np.abs(p_i - p_j)


def _pair_counts(correct: np.ndarray, available: np.ndarray, weights: np.ndarray | None = None):
    """n, n_i (i correct), n_j, n11 for every pair over the trials both saw, optionally trial-weighted."""
    x = (correct & available).astype(np.float32)
    a = available.astype(np.float32)
    xw = x if weights is None else x * weights
    aw = a if weights is None else a * weights
    n = aw @ a.T
    n_i = xw @ a.T
    n11 = xw @ x.T
    return n, n_i, n_i.T, n11


def consistency_from_counts(n, n_i, n_j, n11, c_exp_one: CExpOne = "nan"):
    """c_obs, c_exp and kappa from pair counts (arrays of any matching shape)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        n = np.asarray(n, dtype=np.float64)
        observed = (n - n_i - n_j + 2 * np.asarray(n11, dtype=np.float64)) / n
        expected = c_exp(n_i / n, n_j / n)
    return observed, expected, kappa(observed, expected, c_exp_one)


def consistency(data: DecisionData, aggregation: Aggregation = "whole", c_exp_one: CExpOne = "nan") -> Consistency:
    """All-pairs c_obs, c_exp and kappa. ``per_condition``: each statistic per condition, then the
    mean over conditions (the model-vs-human benchmark's aggregation); ``whole``: all trials pooled."""
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = (data.correct & data.available).sum(axis=1) / data.available.sum(axis=1)
    if aggregation == "whole":
        n, n_i, n_j, n11 = _pair_counts(data.correct, data.available)
        observed, expected, kappas = consistency_from_counts(n, n_i, n_j, n11, c_exp_one)
        with np.errstate(invalid="ignore", divide="ignore"):
            return Consistency(data.names, n, accuracy, observed, expected, kappas, unbiased_kappa(kappas, n))
    if aggregation != "per_condition":
        raise UserError(f"unknown aggregation {aggregation!r}; allowed: whole, per_condition")
    per = []
    for condition in sorted(set(data.conditions.tolist())):
        mask = data.conditions == condition
        n, n_i, n_j, n11 = _pair_counts(data.correct[:, mask], data.available[:, mask])
        stats = consistency_from_counts(n, n_i, n_j, n11, c_exp_one)
        with np.errstate(invalid="ignore", divide="ignore"):
            per.append((n, *stats, unbiased_kappa(stats[2], n)))
    stacked = [np.stack(v) for v in zip(*per)]
    with np.errstate(invalid="ignore"), _quiet_nanmean():
        means = [np.nanmean(v, axis=0) for v in stacked[1:]]
    return Consistency(data.names, stacked[0].sum(axis=0), accuracy, *means)


@contextmanager
def _quiet_nanmean() -> Iterator[None]:
    """Silence numpy's 'mean of empty slice' for pairs that share no trial in some condition."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def bootstrap_kappa(
    data: DecisionData,
    n_resamples: int = 1000,
    seed: int = 0,
    aggregation: Aggregation = "whole",
    c_exp_one: CExpOne = "nan",
    level: float = 0.95,
) -> np.ndarray:
    """Percentile CIs (D, D, 2) of every pair's kappa over trial resamples (stratified by condition).

    Each resample is a count weight per trial (one SeedSequence child per resample, so any subset
    of resamples is reproducible); one weighted Gram matrix per resample gives every pair.
    """
    conditions = sorted(set(data.conditions.tolist()))
    groups = [np.flatnonzero(data.conditions == c) for c in conditions]
    T = data.correct.shape[1]
    D = len(data.names)
    iu = np.triu_indices(D, k=1)
    samples = np.empty((n_resamples, len(iu[0])), dtype=np.float32)
    x = (data.correct & data.available).astype(np.float32)
    a = None if data.available.all() else data.available.astype(np.float32)
    parts: Sequence[slice | np.ndarray] = [slice(None)] if aggregation == "whole" else groups
    factors = [_GramFactors(x[:, p], None if a is None else a[:, p]) for p in parts]
    for b, child in enumerate(np.random.SeedSequence(seed).spawn(n_resamples)):
        rng = np.random.default_rng(child)
        drawn = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        w = np.bincount(drawn, minlength=T).astype(np.float32)
        with _quiet_nanmean():
            k = np.nanmean([f.kappa(w[p], c_exp_one) for f, p in zip(factors, parts)], axis=0)
        samples[b] = k[iu]
    tail = (1 - level) / 2
    with _quiet_nanmean():
        bounds = np.nanquantile(samples, [tail, 1 - tail], axis=0)
    out = np.full((D, D, 2), np.nan)
    out[iu[0], iu[1]] = out[iu[1], iu[0]] = bounds.T
    return out


class _GramFactors:
    """Correct/available matrices with contiguous transposes (BLAS runs about twice as fast on them),
    reused across resamples; ``kappa`` gives the all-pairs kappa for one trial weighting."""

    def __init__(self, x: np.ndarray, a: np.ndarray | None) -> None:
        self.x, self.xt = x, np.ascontiguousarray(x.T)
        self.a, self.at = a, None if a is None else np.ascontiguousarray(a.T)

    def kappa(self, w: np.ndarray, c_exp_one: CExpOne) -> np.ndarray:
        xw = self.x * w
        n11 = xw @ self.xt
        if self.a is None:  # everyone saw every trial: one Gram product suffices
            n = np.full(n11.shape, w.sum())
            n_i = np.broadcast_to((self.x @ w)[:, None], n11.shape)
        else:
            n, n_i = (self.a * w) @ self.at, xw @ self.at
        return consistency_from_counts(n, n_i, n_i.T, n11, c_exp_one)[2]


def group_mean_ci(values: np.ndarray | Sequence[float], level: float = 0.95) -> tuple[float, float, float, float]:
    """Mean, SEM and normal-theory CI of a group's pairwise kappas (Geirhos et al.'s group CIs)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    mean = float(v.mean()) if len(v) else float("nan")
    sem = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
    z = stats.norm.ppf(0.5 + level / 2)
    return mean, sem, mean - z * sem, mean + z * sem


def null_band(
    n_trials: int,
    grid_size: int = 200,
    repeats: int = 5,
    n_bins: int = 40,
    level: float = 0.95,
    seed: int = 0,
    c_exp_one: CExpOne = "nan",
) -> NullBand:
    """Simulate independent binomial observers over a grid_size x grid_size grid of accuracies
    (``repeats`` experiments each, ``n_trials`` trials), bin by the *estimated* c_exp and take the
    central ``level`` of c_obs and kappa per bin. Joint outcomes are drawn as one multinomial per pair."""
    rng = np.random.default_rng(seed)
    p = np.linspace(0, 1, grid_size)
    pi, pj = (g.ravel() for g in np.meshgrid(p, p, indexing="ij"))
    probs = np.stack([pi * pj, pi * (1 - pj), (1 - pi) * pj, (1 - pi) * (1 - pj)], axis=1)
    probs = np.repeat(probs / probs.sum(axis=1, keepdims=True), repeats, axis=0)
    outcome = rng.multinomial(n_trials, probs)  # (pairs, 4): both right, i only, j only, both wrong
    n_i, n_j, n11 = outcome[:, 0] + outcome[:, 1], outcome[:, 0] + outcome[:, 2], outcome[:, 0]
    observed, expected, value = consistency_from_counts(np.full(len(n11), n_trials), n_i, n_j, n11, c_exp_one)
    edges = np.linspace(0, 1, n_bins + 1)
    which = np.clip(np.digitize(expected, edges) - 1, 0, n_bins - 1)
    tail = (1 - level) / 2
    band_obs = np.full((n_bins, 2), np.nan)
    band_kappa = np.full((n_bins, 2), np.nan)
    for b in range(n_bins):
        inside = which == b
        if inside.any():
            band_obs[b] = np.quantile(observed[inside], [tail, 1 - tail])
            finite = inside & np.isfinite(value)
            if finite.any():
                band_kappa[b] = np.quantile(value[finite], [tail, 1 - tail])
    return NullBand(n_trials, edges, band_obs, band_kappa, level)


def categorical_kappa(decisions: np.ndarray, available: np.ndarray | None = None) -> np.ndarray:
    """Cohen's kappa over categorical decisions for every pair (D, T) -> (D, D).

    Abstentions (-1, e.g. the ``abstain`` tie rule or a missed response) form their own category.
    Only trials both decision makers saw count.
    """
    decisions = np.asarray(decisions)
    available = np.ones(decisions.shape, bool) if available is None else np.asarray(available, bool)
    labels = np.unique(decisions[available])
    onehot = (decisions[None] == labels[:, None, None]) & available[None]  # (L, D, T)
    a = available.astype(np.float64)
    n = a @ a.T
    agree = np.einsum("ldt,let->de", onehot.astype(np.float64), onehot.astype(np.float64))
    freq_i = np.einsum("ldt,et->lde", onehot.astype(np.float64), a)  # label counts of i on the shared trials
    with np.errstate(invalid="ignore", divide="ignore"):
        p_o = agree / n
        p_e = np.einsum("lde,led->de", freq_i, freq_i) / n**2
        return (p_o - p_e) / (1 - p_e)


def decisions_from_trials(trials: Sequence[Trial]) -> DecisionData:
    """Model-vs-human trials -> correct/incorrect matrix aligned by stimulus identity (``Trial.stimulus``, the
    benchmark's rule); missed responses are incorrect. A trial without a condition takes its stimulus's
    condition from the other observers. Two observers who share no trial are an error naming their files:
    their kappa would be undefined, and a NaN in a mean hides it."""
    names = tuple(dict.fromkeys(t.subject for t in trials))
    stimuli: dict[str, int] = {}
    first: dict[str, Trial] = {}
    conditions: dict[str, Trial] = {}
    for t in trials:
        if t.stimulus not in stimuli:
            stimuli[t.stimulus] = len(stimuli)
            first[t.stimulus] = t
        elif t.category != first[t.stimulus].category:
            f = first[t.stimulus]
            raise InputError(
                f"{t.path}, row {t.line}, column 'category': stimulus {t.stimulus!r} has category "
                f"{t.category!r}, but {f.path}, row {f.line} says {f.category!r}"
            )
        if t.condition:
            known = conditions.setdefault(t.stimulus, t)
            if known.condition != t.condition:
                raise InputError(
                    f"{t.path}, row {t.line}, column 'condition': stimulus {t.stimulus!r} has condition "
                    f"{t.condition!r}, but {known.path}, row {known.line} says {known.condition!r}"
                )
    index = {n: i for i, n in enumerate(names)}
    correct = np.zeros((len(names), len(stimuli)), bool)
    available = np.zeros((len(names), len(stimuli)), bool)
    files: dict[str, set[str]] = {n: set() for n in names}
    for t in trials:
        d, i = index[t.subject], stimuli[t.stimulus]
        available[d, i] = True
        correct[d, i] = t.response is not None and t.response == t.category
        files[t.subject].add(str(t.path))
    shared = available.astype(np.int64) @ available.T.astype(np.int64)
    lonely = np.argwhere(shared == 0)
    if len(lonely):
        i, j = lonely[0]
        raise InputError(
            f"observers {names[i]!r} ({', '.join(sorted(files[names[i]]))}) and {names[j]!r} "
            f"({', '.join(sorted(files[names[j]]))}) share no stimulus, so their error consistency is "
            "undefined; are these files of one dataset?"
        )
    labels = np.array([conditions[s].condition if s in conditions else "" for s in stimuli])
    return DecisionData(names, tuple(stimuli), labels, correct, available)
