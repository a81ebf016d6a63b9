"""Choose the stimuli whose ratings will best separate the models: maximin expected separation under constraints.

Criterion (``controversial.analysis.separation``): for a candidate set X and S planned participants,
z_tj(X) is the expected bootstrap test statistic of "truth t beats rival j". The design maximises
the weakest pair, min over t != j of z_tj, optimised through its smooth minimum (temperature
``temperature`` in z units) so that every weak pair, not only the single weakest, pulls.

Relative criterion (``baseline``): maximise instead the smallest ratio, over truths, of the truth's weakest
z to the same quantity under a baseline design (the paper's balanced 20 per pair), so the gain is
shared out and no truth is traded away to lift another: a ratio q >= 1 means every truth is at least as
well separated as under the baseline, and, where participants' own variance dominates, needs about
1/q^2 of its participants. Should the search end below the baseline itself on this criterion, it
starts again from the baseline, so the result never scores below it.

Optimisation: the maximin of correlation differences is neither linear nor submodular, so we use
the standard pair for such criteria: greedy forward selection (each step adds the feasible
candidates with the best criterion after adding; effect and participant variance exact, stimulus
variance to first order), then an exchange phase (drop the member whose removal costs least, add
the best feasible candidate, keep the swap only if the exact criterion improves). A test checks the
result against exhaustive search on a tiny pool.

Constraints: exactly ``n_stimuli`` rated stimuli; exactly ``natural_per_class`` natural images per
class; every targeted model pair at least ``min_per_pair`` times (each condition stays a bootstrap
stratum with resampling variance); each class a target (either side) within ``class_tolerance`` of
the mean count. Repeated presentations and attention checks are taken out of the trial budget by the
caller (``n_stimuli = trials - repeats - attention checks``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from controversial.analysis.separation import ReferencePanel, Separation, softmin, target_z
from controversial.analysis.simulate import ParticipantNoise
from controversial.analysis.study import NATURAL
from controversial.errors import UserError
from controversial.progress import Progress

log = logging.getLogger(__name__)


class DesignError(UserError, ValueError):
    """A design request the pool cannot satisfy; the message says which constraint."""


@dataclass(frozen=True)
class Pool:
    """Candidate stimuli: condition ('A|B' or 'natural'), target classes (-1 for natural), true class."""

    conditions: tuple[str, ...]
    targets: np.ndarray  # (N, 2) int, -1 for natural images
    true_class: np.ndarray  # (N,) int, -1 for controversial stimuli
    n_classes: int = 10

    @property
    def natural(self) -> np.ndarray:
        return np.array([c == NATURAL for c in self.conditions])


@dataclass(frozen=True)
class DesignConstraints:
    n_stimuli: int
    natural_per_class: int = 10
    min_per_pair: int = 2
    class_tolerance: float = 0.1


@dataclass(frozen=True)
class Design:
    chosen: np.ndarray  # sorted pool indices
    separation: Separation  # one row per truth
    n_participants: float | np.ndarray  # one count, or (T, 1) one per truth (``participants_plan``)
    objective: float  # smooth minimum of z at n_participants
    weakest: float  # the hard minimum


def design_weights(chosen: Sequence[int] | np.ndarray, n_pool: int) -> np.ndarray:
    """The 0/1 weight vector of a chosen set over a pool of ``n_pool`` candidates (``ReferencePanel.separation``)."""
    weights = np.zeros(n_pool)
    weights[np.asarray(chosen, dtype=np.int64)] = 1
    return weights


HELD_OUT_SEED_OFFSET = 7919  # the second panel's seed is the first's plus this: other simulated participants


def held_out_panel(
    probabilities: np.ndarray,
    conditions: Sequence[str],
    noise: ParticipantNoise,
    n_panel: int,
    truths: Sequence[int] | None = None,
    seed: int = 0,
    shared_sd: float = 0.0,
) -> ReferencePanel:
    """A second reference panel, with other simulated participants, to predict chosen sets on:
    ``panel.separation(design_weights(chosen, N))``.

    The optimiser picks the set that scores best on its panel, that panel's chance fluctuations included,
    so the set's figures on that panel flatter it, and the more the smaller the panel and the noisier the
    participants (docs/design.md, section 1). A fresh panel predicts it as fairly as any set chosen
    without looking at that panel.
    """
    return ReferencePanel(probabilities, conditions, noise, n_panel, truths, seed + HELD_OUT_SEED_OFFSET, shared_sd)


class _Counts:
    """Running counts that decide feasibility: naturals per class, targets per class, stimuli per pair."""

    def __init__(self, pool: Pool, constraints: DesignConstraints) -> None:
        self.pool, self.c = pool, constraints
        K = pool.n_classes
        self.n_controversial = constraints.n_stimuli - constraints.natural_per_class * K
        mean = 2 * self.n_controversial / K
        self.lo = math.floor(mean * (1 - constraints.class_tolerance))
        self.hi = math.ceil(mean * (1 + constraints.class_tolerance))
        self.pairs = sorted({c for c in pool.conditions if c != NATURAL})
        self.pair_of = np.array([self.pairs.index(c) if c != NATURAL else -1 for c in pool.conditions])
        self.natural = np.zeros(K, int)
        self.targets = np.zeros(K, int)
        self.per_pair = np.zeros(len(self.pairs), int)
        self.n_con = 0

    def update(self, n: int, sign: int) -> None:
        if self.pool.conditions[n] == NATURAL:
            self.natural[self.pool.true_class[n]] += sign
        else:
            self.targets[self.pool.targets[n]] += sign
            self.per_pair[self.pair_of[n]] += sign
            self.n_con += sign

    def can_add(self, n: int) -> bool:
        if self.pool.conditions[n] == NATURAL:
            return self.natural[self.pool.true_class[n]] < self.c.natural_per_class
        if self.n_con >= self.n_controversial or (self.targets[self.pool.targets[n]] >= self.hi).any():
            return False
        after = self.targets.copy()
        after[self.pool.targets[n]] += 1
        slots = self.n_controversial - self.n_con - 1
        pairs_after = self.per_pair.copy()
        pairs_after[self.pair_of[n]] += 1
        deficit = np.maximum(self.lo - after, 0)  # one stimulus raises a class's count by at most one
        return (
            deficit.sum() <= 2 * slots
            and deficit.max() <= slots
            and np.maximum(self.c.min_per_pair - pairs_after, 0).sum() <= slots
        )

    def can_remove(self, n: int) -> bool:
        if self.pool.conditions[n] == NATURAL:
            return True
        return (
            self.per_pair[self.pair_of[n]] > self.c.min_per_pair
            and (self.targets[self.pool.targets[n]] > self.lo).all()
        )

    def full(self) -> bool:
        return self.n_con == self.n_controversial and (self.natural == self.c.natural_per_class).all()


def check_design(pool: Pool, constraints: DesignConstraints, chosen: Sequence[int]) -> list[str]:
    """Every constraint the set ``chosen`` violates, in words (empty when it satisfies all)."""
    counts = _Counts(pool, constraints)
    problems = []
    if len(set(chosen)) != len(chosen):
        problems.append("a stimulus is chosen twice")
    for n in chosen:
        counts.update(int(n), +1)
    if len(chosen) != constraints.n_stimuli:
        problems.append(f"{len(chosen)} stimuli chosen, {constraints.n_stimuli} required")
    if (counts.natural != constraints.natural_per_class).any():
        problems.append(f"natural images per class {counts.natural.tolist()}, {constraints.natural_per_class} required")
    if (counts.targets < counts.lo).any() or (counts.targets > counts.hi).any():
        problems.append(f"target counts per class {counts.targets.tolist()} outside [{counts.lo}, {counts.hi}]")
    if (counts.per_pair < constraints.min_per_pair).any():
        problems.append(f"a model pair has fewer than {constraints.min_per_pair} stimuli")
    return problems


def _feasible(counts: _Counts, candidates: np.ndarray) -> np.ndarray:
    return np.array([n for n in candidates if counts.can_add(int(n))], dtype=np.int64)


def _seed(
    pool: Pool, constraints: DesignConstraints, counts: _Counts, rng: np.random.Generator, fixed: list[int]
) -> list[int]:
    """A small feasible start: ``min_per_pair`` random stimuli per pair and one natural image per class."""
    chosen: list[int] = list(fixed)
    natural = pool.natural
    for p in range(len(counts.pairs)):
        members = [n for n in rng.permutation(np.flatnonzero(counts.pair_of == p)) if n not in chosen]
        taken = int(counts.per_pair[p])
        for n in members:
            if taken == constraints.min_per_pair:
                break
            if counts.can_add(int(n)):
                counts.update(int(n), +1)
                chosen.append(int(n))
                taken += 1
        if taken < constraints.min_per_pair:
            raise DesignError(
                f"pair {counts.pairs[p]}: only {taken} candidate(s) fit the class balance, "
                f"min_per_pair={constraints.min_per_pair}"
            )
    if constraints.natural_per_class:
        for cls in range(pool.n_classes):
            members = np.flatnonzero(natural & (pool.true_class == cls))
            if len(members) < constraints.natural_per_class:
                raise DesignError(
                    f"natural images of class {cls}: {len(members)} in the pool, "
                    f"{constraints.natural_per_class} required"
                )
            n = int(rng.choice(members))
            if counts.can_add(n) and n not in chosen:
                counts.update(n, +1)
                chosen.append(n)
    return chosen[len(fixed) :]


@dataclass(frozen=True)
class Criterion:
    """What the optimiser maximises: the smooth minimum over (truth, rival) of z, each truth's row scaled by
    ``truth_scale`` (None: unscaled, the maximin criterion; ``relative_criterion``: against a baseline)."""

    temperature: float
    truth_scale: np.ndarray | None = None  # (T,) one factor per truth row of a Separation

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """(..., T, M) z values -> (...) criterion values."""
        if self.truth_scale is not None:
            z = z * self.truth_scale[:, None]
        flat = z.reshape(*z.shape[:-2], -1)
        return softmin(flat, self.temperature, axis=-1)


Objective = Callable[[np.ndarray], np.ndarray]  # (..., T, M) z at the planned counts -> (...) values to maximise


CAP_RULES = ("participants", "ratio")  # what TotalNeed charges a truth over its cap: see its docstring


@dataclass(frozen=True)
class TotalNeed:
    """Minus the participants the study is predicted to need, averaged over truths, with every truth held to at
    most ``caps`` (``total_need``): the goal a design is judged by (the mean over truths of the participants
    needed, no truth worse than under the paper's kind of design), as an objective.

    A truth's need is its weakest rival's, read off z at the truth's planned count n_t as n_t (target / z)^2:
    exact when participants' variance dominates, and near the planned count otherwise (the participants
    criterion plans each truth near what it should reach). Over a truth's cap, ``cap_rule`` says what it costs:

    - ``participants``: each participant over the cap costs ``penalty`` participants of the mean;
    - ``ratio``: each 1 % over the cap costs ``penalty`` times 1 % of the mean cap, whatever the truth's own need.
      The planner's absolute needs are optimistic, and most for truths it expects to need the minimum (docs/design.md,
      section 6): a truth planned at 0.5 participants that the study finds needs 2 loses a grid step for an excess the
      ``participants`` rule prices at a tenth of a participant. The planner predicts ratios better than counts."""

    counts: np.ndarray  # (T, 1) planned participants per truth, the counts z is taken at
    caps: np.ndarray  # (T,) the most each truth may need
    target: float  # the z a pair needs: critical z (Sidak) + z of the power
    penalty: float = 3.0
    cap_rule: str = "ratio"  # one of CAP_RULES

    def __post_init__(self) -> None:
        if self.cap_rule not in CAP_RULES:
            raise DesignError(f"plan.cap_rule must be one of {', '.join(CAP_RULES)}, got {self.cap_rule!r}")

    def needs(self, z: np.ndarray) -> np.ndarray:
        """(..., T, M) z at the planned counts -> (..., T) each truth's predicted participants needed."""
        with np.errstate(invalid="ignore", divide="ignore"):
            pair = self.counts * (self.target / np.maximum(z, 0.05)) ** 2
        return np.nanmax(pair, axis=-1)

    def __call__(self, z: np.ndarray) -> np.ndarray:
        need = self.needs(z)
        if self.cap_rule == "ratio":  # a truth the baseline cannot identify (cap inf) has no cap
            finite = np.isfinite(self.caps)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(finite, need / np.where(finite, self.caps, 1.0), 0.0)
            scale = self.caps[finite].mean() if finite.any() else 0.0
            over = np.maximum(ratio - 1.0, 0.0).sum(axis=-1) * scale
        else:
            over = np.maximum(need - self.caps, 0.0).sum(axis=-1)
        return -(need.mean(axis=-1) + self.penalty * over)


def total_need(
    baseline: Separation,
    counts: np.ndarray,
    alpha: float,
    power: float,
    n_comparisons: int,
    cap_rule: str = "ratio",
) -> TotalNeed:
    """``TotalNeed`` with each truth capped at the exact participants the ``baseline`` design needs for it."""
    caps = baseline.participants_needed_per_truth(alpha, power, n_comparisons, whole=False)
    counts = np.asarray(counts, dtype=np.float64).reshape(-1, 1)
    return TotalNeed(counts, caps, target_z(alpha, power, n_comparisons), cap_rule=cap_rule)


BASELINE_Z_FLOOR = 1.0  # a truth the baseline barely separates (z below this) is scaled as if it had this z


def _weakest_per_truth(separation: Separation, n_participants: float | np.ndarray) -> np.ndarray:
    """(T,) each truth's weakest z over its rivals, floored at BASELINE_Z_FLOOR (the yardstick of a ratio)."""
    return np.maximum(np.nanmin(separation.z(n_participants), axis=1), BASELINE_Z_FLOOR)


def relative_criterion(baseline: Separation, n_participants: float | np.ndarray, temperature: float) -> Criterion:
    """Each truth's z as a fraction of its weakest z under the ``baseline`` design (same truths), times the
    mean of those weakest z, so that the temperature keeps its z units and a baseline that separates every truth
    equally gives the plain maximin."""
    weakest = _weakest_per_truth(baseline, n_participants)
    return Criterion(temperature, weakest.mean() / weakest)


def ratio_to_baseline(separation: Separation, baseline: Separation, n_participants: float | np.ndarray) -> np.ndarray:
    """(T,) each truth's weakest z as a fraction of its weakest z under the baseline (same truths)."""
    return np.nanmin(separation.z(n_participants), axis=1) / _weakest_per_truth(baseline, n_participants)


def participants_plan(
    baseline: Separation,
    alpha: float,
    power: float,
    n_comparisons: int,
    fraction: float,
    cap: float,
    floor: float = 2.0,
) -> np.ndarray:
    """(T, 1) per-truth participant counts to plan for (``select_design``'s ``n_participants``): ``fraction`` of what
    the ``baseline`` design needs for that truth to beat every rival, at least 2 (the analysis's minimum) and at most
    ``cap``.

    Why: the maximin spends stimuli where z is lowest at one planned count, and so takes them from truths that the
    baseline identifies with the minimum of 2 participants but that then need more. Taking each truth's z at the
    count it should reach instead asks every truth for the same relative gain in participants, the goal a study is
    judged by (docs/design.md, section 6).
    """
    # below 2, exact needs: a truth the baseline identifies with 0.8 participants is planned at 0.8 * fraction
    need = baseline.participants_needed_per_truth(alpha, power, n_comparisons, whole=floor >= 2)
    return np.clip(fraction * np.minimum(need, cap), floor, max(floor, cap))[:, None]


def _removable(counts: _Counts, w: np.ndarray, fixed: set[int]) -> np.ndarray:
    """Chosen stimuli that may leave the set: not fixed, and no constraint falls below its minimum."""
    return np.array([n for n in np.flatnonzero(w) if n not in fixed and counts.can_remove(int(n))], dtype=np.int64)


def _best_swap(
    panel: ReferencePanel,
    pool: Pool,
    counts: _Counts,
    w: np.ndarray,
    fixed: set[int],
    n_participants: float | np.ndarray,
    criterion: Objective,
    current: float,
    width: int,
) -> tuple[int, int, float] | None:
    """The best improving exchange among the ``width`` cheapest removals x ``width`` best additions (exact check),
    taken for the first removal that has one."""
    members = _removable(counts, w, fixed)
    if len(members) == 0:
        return None
    after_removal = criterion(panel.z_after(w, members, n_participants, sign=-1))
    for out in members[np.argsort(-after_removal, kind="stable")[:width]]:
        out = int(out)
        counts.update(out, -1)
        w[out] = 0
        candidates = _feasible(counts, np.flatnonzero(w == 0))
        candidates = candidates[candidates != out]
        best: tuple[int, int, float] | None = None
        if len(candidates):
            gains = criterion(panel.z_after(w, candidates, n_participants))
            for n in candidates[np.argsort(-gains, kind="stable")[:width]]:
                w[n] = 1
                value = float(criterion(panel.separation(w).z(n_participants)))
                w[n] = 0
                if value > current + 1e-9 and (best is None or value > best[2]):
                    best = (out, int(n), value)
        counts.update(out, +1)
        w[out] = 1
        if best is not None:
            return best
    return None


def _repair_swap(
    panel: ReferencePanel,
    pool: Pool,
    counts: _Counts,
    w: np.ndarray,
    fixed: set[int],
    n_participants: float | np.ndarray,
    criterion: Objective,
) -> tuple[int, int] | None:
    """An exchange that strictly shrinks the class-balance deficit, for when greedy growth is stuck.

    Growth gets stuck when a class is short of its minimum count and every unchosen stimulus that
    targets it also targets a class already at its maximum (on a single pair's 90 cells: the few
    cells between two short classes are taken). Swapping a chosen stimulus that targets no short
    class for the best unchosen one that targets a short class shrinks the deficit by one or two, so
    repairs end; the cheapest removal and the best addition by the criterion are preferred.
    """
    short = counts.targets < counts.lo
    if not short.any():
        return None
    unchosen = np.flatnonzero((w == 0) & ~pool.natural)
    covering = unchosen[short[pool.targets[unchosen]].any(axis=1)]
    members = _removable(counts, w, fixed)
    members = members[~pool.natural[members] & ~short[pool.targets[members]].any(axis=1)]
    if len(covering) == 0 or len(members) == 0:
        return None
    removal_order = members[np.argsort(-criterion(panel.z_after(w, members, n_participants, sign=-1)))]
    addition_order = covering[np.argsort(-criterion(panel.z_after(w, covering, n_participants)))]
    for into in addition_order:
        for out in removal_order:
            targets = counts.targets.copy()
            targets[pool.targets[out]] -= 1
            if (targets[pool.targets[into]] < counts.hi).all():
                return int(out), int(into)
    return None


def select_design(
    pool: Pool,
    panel: ReferencePanel,
    constraints: DesignConstraints,
    n_participants: float | np.ndarray,
    temperature: float = 0.5,
    step_fraction: float = 0.02,
    max_exchanges: int = 200,
    exchange_width: int = 4,
    seed: int = 0,
    fixed: Sequence[int] = (),
    restarts: int = 1,
    baseline: Sequence[int] | np.ndarray | None = None,
    objective: Objective | None = None,
    progress: bool = False,
) -> Design:
    """The constrained set maximising the (smooth) weakest pairwise separation with ``n_participants``, or
    ``objective`` of the z there (e.g. ``total_need``).

    ``fixed``: pool indices that must be in the set (e.g. stimuli already shown in an earlier batch
    that should be kept); they count towards every constraint. ``restarts``: independent random
    starts (seeds ``seed``, ``seed + 1``, ...); the best local optimum wins. ``baseline``: pool indices
    of a reference design; the criterion becomes relative to it (module docstring), and when the
    best local optimum scores below the baseline itself (which meets every constraint and holds
    ``fixed``), the exchange search starts again from the baseline. ``progress``: a bar on a terminal,
    a line every so often in a log, for the growth and the exchanges (minutes on a sweep's thousands of
    candidates).
    """
    if panel.N != len(pool.conditions):
        raise DesignError(f"the reference panel covers {panel.N} stimuli, the pool {len(pool.conditions)}")
    if objective is not None and baseline is not None:
        raise DesignError("select_design takes a baseline (the relative criterion) or an objective, not both")
    criterion: Objective = objective if objective is not None else Criterion(temperature)
    if baseline is not None:
        at_baseline = panel.separation(design_weights(baseline, panel.N))
        criterion = relative_criterion(at_baseline, n_participants, temperature)
    options = (constraints, n_participants, criterion, step_fraction, max_exchanges, exchange_width, progress)
    best = max(
        (_select_once(pool, panel, *options, seed + k, fixed) for k in range(max(1, restarts))),
        key=lambda d: d.objective,
    )
    if (
        baseline is not None
        and best.objective < float(criterion(at_baseline.z(n_participants)))
        and set(fixed) <= set(int(n) for n in baseline)
        and not check_design(pool, constraints, list(baseline))
    ):
        best = _select_once(pool, panel, *options, seed, fixed, start=baseline)
    return best


def _grow(
    pool: Pool,
    panel: ReferencePanel,
    constraints: DesignConstraints,
    counts: _Counts,
    n_participants: float | np.ndarray,
    criterion: Objective,
    step_fraction: float,
    rng: np.random.Generator,
    fixed: Sequence[int],
    bar: Progress,
) -> np.ndarray:
    """Greedy forward selection from a small random feasible seed to a full set; returns its 0/1 weights."""
    N = len(pool.conditions)
    chosen: list[int] = []
    for n in fixed:
        if not counts.can_add(int(n)):
            raise DesignError(f"fixed stimulus {n} violates a constraint")
        counts.update(int(n), +1)
        chosen.append(int(n))
    chosen += _seed(pool, constraints, counts, rng, chosen)
    w = design_weights(chosen, N)
    bar.update(len(chosen))
    step = max(1, int(round(step_fraction * constraints.n_stimuli)))
    fixed_set = set(int(n) for n in fixed)
    while not counts.full():
        candidates = _feasible(counts, np.flatnonzero(w == 0))
        if len(candidates) == 0:  # the class balance painted itself into a corner: trade for a deficit class
            swap = _repair_swap(panel, pool, counts, w, fixed_set, n_participants, criterion)
            if swap is None:
                raise DesignError(
                    f"no candidate fits the remaining constraints (target counts per class "
                    f"{counts.targets.tolist()}, allowed [{counts.lo}, {counts.hi}]); enlarge the pool or "
                    "relax class_tolerance"
                )
            out, into = swap
            counts.update(out, -1)
            counts.update(into, +1)
            w[out], w[into] = 0, 1
            continue
        scores = criterion(panel.z_after(w, candidates, n_participants))
        added = 0
        for i in np.argsort(-scores, kind="stable"):
            n = int(candidates[i])
            if counts.can_add(n):
                counts.update(n, +1)
                w[n] = 1
                added += 1
                if added == step:
                    break
        bar.update(added)
    return w


def _select_once(
    pool: Pool,
    panel: ReferencePanel,
    constraints: DesignConstraints,
    n_participants: float | np.ndarray,
    criterion: Objective,
    step_fraction: float,
    max_exchanges: int,
    exchange_width: int,
    progress: bool,
    seed: int,
    fixed: Sequence[int],
    start: Sequence[int] | None = None,
) -> Design:
    """One local optimum: greedy growth (or the given feasible ``start``), then improving exchanges."""
    counts = _Counts(pool, constraints)
    if counts.n_controversial < 0:
        raise DesignError(
            f"n_stimuli={constraints.n_stimuli} is less than the {constraints.natural_per_class} x "
            f"{pool.n_classes} natural images required"
        )
    if counts.n_controversial < constraints.min_per_pair * len(counts.pairs):
        raise DesignError(
            f"{counts.n_controversial} controversial slots cannot give {len(counts.pairs)} pairs "
            f"min_per_pair={constraints.min_per_pair} each"
        )
    if start is None:
        rng = np.random.default_rng(seed)
        with Progress(constraints.n_stimuli, f"design: greedy growth (seed {seed})", progress) as bar:
            w = _grow(pool, panel, constraints, counts, n_participants, criterion, step_fraction, rng, fixed, bar)
    else:
        for n in start:
            counts.update(int(n), +1)
        w = design_weights(start, len(pool.conditions))
    fixed_set = set(int(n) for n in fixed)
    current = float(criterion(panel.separation(w).z(n_participants)))
    swaps = 0
    with Progress(max_exchanges, "design: exchanges (at most)", progress) as bar:
        while swaps < max_exchanges:
            improved = _best_swap(panel, pool, counts, w, fixed_set, n_participants, criterion, current, exchange_width)
            if improved is None:
                break
            out, best, current = improved
            counts.update(out, -1)
            counts.update(best, +1)
            w[out], w[best] = 0, 1
            swaps += 1
            bar.set_postfix(objective=f"{current:.4g}")
            bar.update()
    separation = panel.separation(w)
    z = separation.z(n_participants)
    log.info(
        "design (%s): %d stimuli, weakest pairwise z %.2f at %s participants (%d exchanges)",
        "from the baseline" if start is not None else f"greedy, seed {seed}",
        int(w.sum()),
        float(np.nanmin(z)),
        np.round(n_participants, 1).ravel().tolist() if np.ndim(n_participants) else n_participants,
        swaps,
    )
    return Design(np.flatnonzero(w), separation, n_participants, current, float(np.nanmin(z)))
