"""Graded ratings -> categorical decisions, with an explicit rule for ties.

Five-point human ratings tie often (e.g. all categories rated 0), so the rule matters for
accuracy and error consistency; it is always a named, configurable choice.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from controversial.errors import UserError

TieRule = Literal["random", "first", "abstain"]
TIE_RULES: tuple[str, ...] = ("random", "first", "abstain")
ABSTAIN = -1


def decide(ratings: np.ndarray, tie_rule: TieRule = "random", seed: int = 0) -> np.ndarray:
    """Arg-max over the last axis. Ties: ``random`` (uniform among the maxima, seeded), ``first``
    (lowest category index), or ``abstain`` (returns -1, scored as a missed response)."""
    if tie_rule not in TIE_RULES:
        raise UserError(f"unknown tie_rule {tie_rule!r}; allowed: {', '.join(TIE_RULES)}")
    ratings = np.asarray(ratings, dtype=np.float64)
    is_max = ratings >= ratings.max(axis=-1, keepdims=True) - 1e-12
    if tie_rule == "first":
        return np.argmax(is_max, axis=-1)
    if tie_rule == "abstain":
        choice = np.argmax(is_max, axis=-1)
        return np.where(is_max.sum(axis=-1) > 1, ABSTAIN, choice)
    noise = np.random.default_rng(seed).random(ratings.shape)
    return np.argmax(np.where(is_max, noise, -1.0), axis=-1)
