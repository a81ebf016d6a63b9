"""Quality control of one participant's answers: the flags a researcher excludes on, by explicit policy.

Flags are derived at export time from what the server stores for every trial (the ratings, the
browser's reaction times, and ``interval_ms``, the time the *server* measured since the previous
answer), so thresholds can be set after the fact, e.g. as preregistered. A script can fake its
reaction times but not the server's clock, so a trial counts as fast when either is below the floor.
Nothing here drops data: flags go to ``participants.csv`` and ``analyze.py exclude_flags=[...]``
turns them into exclusions that the report lists.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from pydantic import Field

from controversial.options import Fraction, Options

FLAGS = ("attention_failed", "too_fast", "straight_lining", "answers_refused", "browser_changed", "pid_conflict")


class QualitySettings(Options):
    """Thresholds of the flags (``quality.*`` of ``serve_study.py``); defaults suit a ten-category rating trial
    (ten clicks and Continue). The bounds are the rules' own: a value the option accepts gives a flag that a
    careful participant can avoid (``max_identical_run`` 1 would flag everyone)."""

    min_trial_rt_ms: float = Field(
        1500.0, ge=0, description='a trial is "fast" below this many milliseconds, by the browser or the server'
    )
    max_fast_fraction: Fraction = Field(0.1, description="too_fast: more than this fraction of trials are fast")
    max_identical_run: int = Field(
        10, ge=2, description="straight_lining: this many consecutive trials rated identically"
    )
    min_attention_passed: Fraction = Field(1.0, description="attention_failed: passed fraction below this")


@dataclass(frozen=True)
class TrialRecord:
    """What quality control reads of one stored answer (attention checks included)."""

    ratings: tuple[int, ...]
    rt_ms: float
    interval_ms: float | None  # server-measured time since the previous answer; None if unknown
    attention_passed: bool | None  # None: not an attention check


@dataclass(frozen=True)
class Quality:
    """One participant's quality figures and flags (a subset of ``FLAGS``, in that order)."""

    median_rt_ms: float | None
    n_fast: int
    longest_identical_run: int
    attention_passed: int
    attention_total: int
    flags: tuple[str, ...]


def is_fast(trial: TrialRecord, settings: QualitySettings) -> bool:
    """Below the floor by the browser's clock or by the server's."""
    return trial.rt_ms < settings.min_trial_rt_ms or (
        trial.interval_ms is not None and trial.interval_ms < settings.min_trial_rt_ms
    )


def too_fast(n_fast: int, n_trials: int, settings: QualitySettings) -> bool:
    """The ``too_fast`` rule, shared by the export and the live monitor (``monitor.py``), which counts in SQL."""
    return n_trials > 0 and n_fast / n_trials > settings.max_fast_fraction


def attention_failed(passed: int, total: int, settings: QualitySettings) -> bool:
    """The ``attention_failed`` rule, shared likewise."""
    return total > 0 and passed / total < settings.min_attention_passed


def longest_identical_run(ratings: Sequence[Sequence[int]]) -> int:
    """Longest stretch of consecutive trials with exactly the same ratings (0 for no trials)."""
    longest = run = 0
    previous = None
    for current in map(tuple, ratings):
        run = run + 1 if current == previous else 1
        longest, previous = max(longest, run), current
    return longest


def assess(
    trials: Sequence[TrialRecord],
    settings: QualitySettings,
    n_refused: int = 0,
    n_browser_changes: int = 0,
    pid_conflict: bool = False,
) -> Quality:
    """Figures and flags for one participant's trials in presentation order; ``pid_conflict``: another
    participant row of this study holds the same PROLIFIC_PID under another SESSION_ID."""
    rated = [t for t in trials if t.attention_passed is None]
    checks = [t for t in trials if t.attention_passed is not None]
    n_fast = sum(is_fast(t, settings) for t in trials)
    run = longest_identical_run([t.ratings for t in rated])
    passed = sum(bool(t.attention_passed) for t in checks)
    raised = {
        "attention_failed": attention_failed(passed, len(checks), settings),
        "too_fast": too_fast(n_fast, len(trials), settings),
        "straight_lining": run >= settings.max_identical_run,
        "answers_refused": n_refused > 0,
        "browser_changed": n_browser_changes > 0,
        "pid_conflict": pid_conflict,
    }
    return Quality(
        median_rt_ms=statistics.median(t.rt_ms for t in trials) if trials else None,
        n_fast=n_fast,
        longest_identical_run=run,
        attention_passed=passed,
        attention_total=len(checks),
        flags=tuple(f for f in FLAGS if raised[f]),
    )
