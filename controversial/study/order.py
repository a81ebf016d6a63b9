"""Per-participant presentation order, generated once on the server and stored with the participant.

First presentations are shuffled; each repeat goes at a random place after its first showing, at
least ``min_repeat_gap`` trials later when the sequence allows. The session is cut into as many equal
bands as there are attention checks and each check goes anywhere in its own band, uniformly: they sample
attention across the whole session, yet a script that counts trials cannot predict where one is (evenly
spaced checks with a little jitter could be skipped by position). Demo trials are not part of the order:
the browser shows them before the study.
"""

from __future__ import annotations

import random
from typing import Sequence

from controversial.records.study import TrialSpec


def _move_repeated_forward(order: list[TrialSpec], repeated: set[str], gap: int, rng: random.Random) -> None:
    """Swap first showings of repeated stimuli out of the last ``gap`` places, so the gap can be kept."""
    limit = len(order) - gap - 1
    late = [i for i in range(max(limit, 0), len(order)) if order[i].stimulus_id in repeated]
    free = [i for i in range(max(limit, 0)) if order[i].stimulus_id not in repeated]
    for i, j in zip(late, rng.sample(free, min(len(late), len(free))), strict=False):
        order[i], order[j] = order[j], order[i]


def participant_order(trials: Sequence[TrialSpec], rng: random.Random, min_repeat_gap: int = 10) -> list[TrialSpec]:
    """A fresh random order of every non-demo trial in the bundle's trial list."""
    firsts = [t for t in trials if t.kind == "stimulus" and t.image_repetition == 0]
    repeats = [t for t in trials if t.kind == "stimulus" and t.image_repetition > 0]
    checks = [t for t in trials if t.kind == "attention"]
    rng.shuffle(firsts)
    rng.shuffle(repeats)
    rng.shuffle(checks)
    order = list(firsts)
    _move_repeated_forward(order, {t.stimulus_id for t in repeats}, min_repeat_gap, rng)
    for repeat in repeats:
        first_at = next(
            i
            for i, t in enumerate(order)
            if t.stimulus_id == repeat.stimulus_id and t.image_repetition == repeat.image_repetition - 1
        )
        earliest = min(first_at + 1 + min_repeat_gap, len(order))
        order.insert(rng.randint(earliest, len(order)), repeat)
    total = len(order) + len(checks)
    for k, check in enumerate(checks):  # band k of the session: [k * total / n, (k + 1) * total / n)
        start, end = (k * total) // len(checks), ((k + 1) * total) // len(checks)
        order.insert(rng.randint(max(start, 1), max(end - 1, 1)), check)
    return order
