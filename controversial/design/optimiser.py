"""Choose the stimuli whose ratings will best separate the models: the constrained set that maximises an objective
of the expected separation (``objectives``; maximin by default) on a reference panel (``separation``).

Optimisation: the maximin of correlation differences is neither linear nor submodular, so we use
the standard pair for such criteria: greedy forward selection (each step adds the feasible
candidates with the best criterion after adding; effect and participant variance exact, stimulus
variance to first order), then an exchange phase (drop the member whose removal costs least, add
the best feasible candidate, keep the swap only if the exact criterion improves). A test checks the
result against exhaustive search on a tiny pool. With a baseline (the relative criterion), should the
search end below the baseline itself, it starts again from the baseline, so the result never scores below it.

The search talks to the criterion through one object, ``Scoring`` (panel, planned counts, objective): the
value of every candidate change at once, and the exact value of a set; it never handles z itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from controversial.analysis.simulate import ParticipantNoise
from controversial.design.constraints import ConstraintCounts, DesignConstraints, DesignError, Pool, check_design
from controversial.design.objectives import Criterion, Objective, relative_criterion
from controversial.design.options import DesignPlan
from controversial.design.separation import ReferencePanel, Separation
from controversial.progress import Progress

log = logging.getLogger(__name__)


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
    participants (docs/design.md, "The reference panel"). A fresh panel predicts it as fairly as any set chosen
    without looking at that panel.
    """
    return ReferencePanel(probabilities, conditions, noise, n_panel, truths, seed + HELD_OUT_SEED_OFFSET, shared_sd)


@dataclass(frozen=True)
class Scoring:
    """The objective of the z at ``n_participants`` on ``panel``: what the search asks of the criterion."""

    panel: ReferencePanel
    n_participants: float | np.ndarray
    objective: Objective

    def after(self, w: np.ndarray, candidates: np.ndarray, sign: int = 1) -> np.ndarray:
        """(C,) the objective after adding (``sign`` +1) or removing (-1) each candidate (``panel.z_after``)."""
        return self.objective(self.panel.z_after(w, candidates, self.n_participants, sign=sign))

    def of(self, w: np.ndarray) -> float:
        """The exact objective of the set with 0/1 weights ``w``."""
        return float(self.objective(self.panel.separation(w).z(self.n_participants)))


def _seed(
    pool: Pool, constraints: DesignConstraints, counts: ConstraintCounts, rng: np.random.Generator, fixed: list[int]
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
            of_class = np.flatnonzero(natural & (pool.true_class == cls))
            if len(of_class) < constraints.natural_per_class:
                raise DesignError(
                    f"natural images of class {cls}: {len(of_class)} in the pool, "
                    f"{constraints.natural_per_class} required"
                )
            n = int(rng.choice(of_class))
            if counts.can_add(n) and n not in chosen:
                counts.update(n, +1)
                chosen.append(n)
    return chosen[len(fixed) :]


def _best_swap(
    score: Scoring, counts: ConstraintCounts, w: np.ndarray, fixed: set[int], current: float, width: int
) -> tuple[int, int, float] | None:
    """The best improving exchange among the ``width`` cheapest removals x ``width`` best additions (exact check),
    taken for the first removal that has one."""
    members = counts.removable(w, fixed)
    if len(members) == 0:
        return None
    after_removal = score.after(w, members, sign=-1)
    for out in members[np.argsort(-after_removal, kind="stable")[:width]]:
        out = int(out)
        counts.update(out, -1)
        w[out] = 0
        candidates = counts.feasible(np.flatnonzero(w == 0))
        candidates = candidates[candidates != out]
        best: tuple[int, int, float] | None = None
        if len(candidates):
            gains = score.after(w, candidates)
            for n in candidates[np.argsort(-gains, kind="stable")[:width]]:
                w[n] = 1
                value = score.of(w)
                w[n] = 0
                if value > current + 1e-9 and (best is None or value > best[2]):
                    best = (out, int(n), value)
        counts.update(out, +1)
        w[out] = 1
        if best is not None:
            return best
    return None


def _repair_swap(
    score: Scoring, pool: Pool, counts: ConstraintCounts, w: np.ndarray, fixed: set[int]
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
    members = counts.removable(w, fixed)
    members = members[~pool.natural[members] & ~short[pool.targets[members]].any(axis=1)]
    if len(covering) == 0 or len(members) == 0:
        return None
    removal_order = members[np.argsort(-score.after(w, members, sign=-1))]
    addition_order = covering[np.argsort(-score.after(w, covering))]
    for into in addition_order:
        for out in removal_order:
            targets = counts.targets.copy()
            targets[pool.targets[out]] -= 1
            if (targets[pool.targets[into]] < counts.hi).all():
                return int(out), int(into)
    return None


@dataclass(frozen=True)
class _Search:
    """How one local search runs (``select_design``'s settings)."""

    step_fraction: float
    max_exchanges: int
    exchange_width: int
    progress: bool


def select_design(
    pool: Pool,
    panel: ReferencePanel,
    constraints: DesignConstraints,
    n_participants: float | np.ndarray,
    temperature: float = DesignPlan.model_fields["temperature"].default,
    step_fraction: float = 0.02,
    max_exchanges: int = DesignPlan.model_fields["max_exchanges"].default,
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
    of a reference design; the criterion becomes relative to it (``objectives.relative_criterion``), and when
    the best local optimum scores below the baseline itself (which meets every constraint and holds
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
    score = Scoring(panel, n_participants, criterion)
    search = _Search(step_fraction, max_exchanges, exchange_width, progress)
    best = max(
        (_select_once(pool, score, constraints, search, seed + k, fixed) for k in range(max(1, restarts))),
        key=lambda d: d.objective,
    )
    if (
        baseline is not None
        and best.objective < float(criterion(at_baseline.z(n_participants)))
        and set(fixed) <= set(int(n) for n in baseline)
        and not check_design(pool, constraints, list(baseline))
    ):
        best = _select_once(pool, score, constraints, search, seed, fixed, start=baseline)
    return best


def _grow(
    pool: Pool,
    score: Scoring,
    constraints: DesignConstraints,
    counts: ConstraintCounts,
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
        candidates = counts.feasible(np.flatnonzero(w == 0))
        if len(candidates) == 0:  # the class balance painted itself into a corner: trade for a deficit class
            swap = _repair_swap(score, pool, counts, w, fixed_set)
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
        scores = score.after(w, candidates)
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
    score: Scoring,
    constraints: DesignConstraints,
    search: _Search,
    seed: int,
    fixed: Sequence[int],
    start: Sequence[int] | np.ndarray | None = None,
) -> Design:
    """One local optimum: greedy growth (or the given feasible ``start``), then improving exchanges."""
    counts = ConstraintCounts(pool, constraints)
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
        with Progress(constraints.n_stimuli, f"design: greedy growth (seed {seed})", search.progress) as bar:
            w = _grow(pool, score, constraints, counts, search.step_fraction, rng, fixed, bar)
    else:
        for n in start:
            counts.update(int(n), +1)
        w = design_weights(start, len(pool.conditions))
    fixed_set = set(int(n) for n in fixed)
    current = score.of(w)
    swaps = 0
    with Progress(search.max_exchanges, "design: exchanges (at most)", search.progress) as bar:
        while swaps < search.max_exchanges:
            improved = _best_swap(score, counts, w, fixed_set, current, search.exchange_width)
            if improved is None:
                break
            out, best, current = improved
            counts.update(out, -1)
            counts.update(best, +1)
            w[out], w[best] = 0, 1
            swaps += 1
            bar.set_postfix(objective=f"{current:.4g}")
            bar.update()
    n_participants = score.n_participants
    separation = score.panel.separation(w)
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
