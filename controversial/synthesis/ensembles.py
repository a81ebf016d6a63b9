"""Which trained instances each optimisation step of an ensemble uses (``synthesis.ensemble``).

``joint`` (the default) runs every instance of both models at every step: the objective is the LSE over all
their terms (``objectives.py``), and a step costs as many forward and backward passes as there are instances.
``round_robin`` runs one instance per model per step, in turn (instance 0 of each model, then 1, ...), so a
step costs what a single checkpoint's costs; over a cycle the image still climbs every instance's objective
(docs/results.md: how often each transfers to a held-out instance, and at what cost). What a step does not see
is kept in a window of each instance set's latest scores: the stop rule, the stall rule and the choice of the
best image read the window's minimum (every instance set must have reached a score, not only the current one),
and acceptance is always scored on every instance at the end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controversial.synthesis.options import EnsembleStrategy


@dataclass(frozen=True)
class StepMembers:
    """The instances one step runs (indices into the synthesis models) and the model each is an instance of
    (``groups`` as the objective takes it; None for single checkpoints)."""

    indices: tuple[int, ...]
    groups: tuple[int, ...] | None


def step_schedule(n_models: int, groups: Sequence[int] | None, strategy: EnsembleStrategy) -> tuple[StepMembers, ...]:
    """The cycle of steps: step ``t`` runs ``schedule[t % len(schedule)]``. One entry (every instance) unless
    ``round_robin`` with ensembles, where model g's instance ``t % n_g`` runs at step t (the cycle's length is
    the least common multiple of the models' instance counts, so every combination in it recurs)."""
    every = StepMembers(tuple(range(n_models)), None if groups is None else tuple(groups))
    if groups is None or strategy == "joint":
        return (every,)
    owners = sorted(set(groups))
    members = {g: [i for i, owner in enumerate(groups) if owner == g] for g in owners}
    period = math.lcm(*(len(m) for m in members.values()))
    return tuple(
        StepMembers(tuple(members[g][t % len(members[g])] for g in owners), tuple(owners)) for t in range(period)
    )
