"""What a design may choose: the candidate pool and the study's constraints, and the running counts that check them.

Constraints: exactly ``n_stimuli`` rated stimuli; exactly ``natural_per_class`` natural images per
class; every targeted model pair at least ``min_per_pair`` times (each condition stays a bootstrap
stratum with resampling variance); each class a target (either side) within ``class_tolerance`` of
the mean count. Repeated presentations and attention checks are taken out of the trial budget
(``DesignConstraints.from_budget``: ``n_stimuli = trials - repeats - attention checks``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from controversial.analysis.study import NATURAL
from controversial.design.options import DesignBudget
from controversial.errors import UserError


class DesignError(UserError):
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


def _budget_default(name: str) -> Any:
    """The budget option's default, so that a constraint built by hand and one from the budget agree."""
    return DesignBudget.model_fields[name].default


@dataclass(frozen=True)
class DesignConstraints:
    """The constraints the optimiser keeps, in rated stimuli (the budget counts trials). Unlike the budget's options,
    any tolerance is allowed here (a search over a tiny pool may ignore the class balance)."""

    n_stimuli: int
    natural_per_class: int = _budget_default("natural_per_class")
    min_per_pair: int = _budget_default("min_per_pair")
    class_tolerance: float = _budget_default("class_tolerance")

    @classmethod
    def from_budget(cls, budget: DesignBudget) -> DesignConstraints:
        """The budget's constraints: its trials less the repeated presentations and the attention checks."""
        return cls(
            budget.trials - budget.n_repeats - budget.n_attention,
            budget.natural_per_class,
            budget.min_per_pair,
            budget.class_tolerance,
        )


class ConstraintCounts:
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

    def feasible(self, candidates: np.ndarray) -> np.ndarray:
        """The candidates that may join the set now."""
        return np.array([n for n in candidates if self.can_add(int(n))], dtype=np.int64)

    def removable(self, w: np.ndarray, fixed: set[int]) -> np.ndarray:
        """Chosen stimuli (``w`` > 0) that may leave the set: not fixed, and no constraint falls below its minimum."""
        return np.array([n for n in np.flatnonzero(w) if n not in fixed and self.can_remove(int(n))], dtype=np.int64)


def check_design(pool: Pool, constraints: DesignConstraints, chosen: Sequence[int]) -> list[str]:
    """Every constraint the set ``chosen`` violates, in words (empty when it satisfies all)."""
    counts = ConstraintCounts(pool, constraints)
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
