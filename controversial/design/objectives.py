"""What the optimiser maximises, as a function of the expected z of every (truth, rival) pair at the planned counts.

Maximin (``Criterion``): for a candidate set X and S planned participants, z_tj(X) is the expected
bootstrap test statistic of "truth t beats rival j" (``separation``). The design maximises the weakest
pair, min over t != j of z_tj, optimised through its smooth minimum (temperature ``temperature`` in z
units) so that every weak pair, not only the single weakest, pulls.

Relative (``relative_criterion``): maximise instead the smallest ratio, over truths, of the truth's weakest
z to the same quantity under a baseline design (the paper's balanced 20 per pair), so the gain is
shared out and no truth is traded away to lift another: a ratio q >= 1 means every truth is at least as
well separated as under the baseline, and, where participants' own variance dominates, needs about
1/q^2 of its participants.

Participants (``participants_plan``): the maximin with each truth's z taken at a share of the participants
the baseline needs for it. Total (``total_need``): the predicted participants averaged over truths, none
above the baseline's need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from controversial.design.constraints import DesignError
from controversial.design.separation import Separation, softmin, target_z


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
      The planner's absolute needs are optimistic, and most for truths it expects to need the minimum
      (docs/design.md, "The criteria"): a truth planned at 0.5 participants that the study finds needs 2 loses a grid
      step for an excess the ``participants`` rule prices at a tenth of a participant. The planner predicts ratios
      better than counts."""

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
    judged by (docs/design.md, "The criteria").
    """
    # below 2, exact needs: a truth the baseline identifies with 0.8 participants is planned at 0.8 * fraction
    need = baseline.participants_needed_per_truth(alpha, power, n_comparisons, whole=floor >= 2)
    return np.clip(fraction * np.minimum(need, cap), floor, max(floor, cap))[:, None]
