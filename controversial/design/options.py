"""The design's option groups: the study's budget, how it is planned, and the earlier batches of an adaptive study.

``design_study.py`` composes them (``budget``, ``plan``, ``adaptive``); the optimiser takes the budget's
constraints from ``constraints.DesignConstraints.from_budget``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from controversial.errors import UserError
from controversial.options import Count, Fraction, Options, ordered_range


class DesignBudget(Options):
    trials: Count = Field(866, description="trials per participant: rated stimuli + repeats + attention checks")
    n_repeats: int = Field(42, ge=0, description="repeated presentations (test-retest; not used to score models)")
    n_attention: int = Field(4, ge=0, description="instructional attention checks")
    natural_per_class: int = Field(10, ge=0, description="natural test images in the study, per class")
    natural_candidates_per_class: int = Field(50, ge=0, description="natural test images the design chooses from")
    seeds_per_cell: Count = Field(
        1, description="accepted seeds per sweep cell the design may choose from, the most controversial first"
    )
    min_per_pair: int = Field(2, ge=0, description="every targeted model pair at least this often (a stratum)")
    class_tolerance: Fraction = Field(0.1, description="each class a target within +- this fraction of the mean")

    @model_validator(mode="after")
    def _fits(self) -> DesignBudget:
        if self.natural_candidates_per_class < self.natural_per_class:
            raise UserError(
                f"natural_candidates_per_class={self.natural_candidates_per_class} is below natural_per_class="
                f"{self.natural_per_class}: the design needs at least as many candidates as it chooses"
            )
        if self.trials <= self.n_repeats + self.n_attention:
            raise UserError(
                f"trials={self.trials} leaves no rated stimuli after {self.n_repeats} repeats and "
                f"{self.n_attention} attention checks"
            )
        return self


class DesignPlan(Options):
    n_participants: int = Field(30, ge=2, description="participants the design is optimised (and power reported) for")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of the final test")
    power: float = Field(0.8, gt=0, lt=1, description="power the participants needed are reported for")
    correction: Literal["holm-sidak", "none"] = Field(
        "holm-sidak", description="holm-sidak: Sidak over all pairs of models + lower ceiling (conservative)"
    )
    truths: list[str] = Field(default_factory=list, description="models that may be the truth; []: all")
    noise_sd: tuple[float, float] = Field((0.8, 1.6), description="participant logit noise range (no pilot)")
    gain: tuple[float, float] = Field((0.7, 1.3), description="participant gain range (no pilot)")
    pilot_ratings: str | None = Field(None, description="pilot ratings (PNAS format): fit the noise model to them")
    pilot_model_responses: str | None = Field(None, description="model responses for the pilot's images")
    n_panel: int = Field(
        256, ge=2, description="simulated reference participants per truth (fewer: the optimiser fits their noise)"
    )
    shared_sd: float | Literal["fit"] = Field(
        0.0,
        description="sd of a deviation from the truth that people share (logit units; integrated out); 0: none; "
        "fit: from the pilot or the earlier batches, by how much more people agree than the best model explains",
    )
    criterion: Literal["maximin", "relative", "participants", "total"] = Field(
        "participants",
        description="maximin: the weakest pairwise z; relative: each truth's weakest z as a fraction of the "
        "balanced design's (no truth worse off than under the paper's kind of design); participants: the weakest "
        "z with each truth's taken at plan.fraction of the participants the balanced design needs for it; total: "
        "the fewest predicted participants averaged over truths, none more than under the balanced design",
    )
    fraction: float = Field(
        0.5, gt=0, le=1, description="criterion participants: each truth planned for this share of its balanced need"
    )
    cap_rule: Literal["participants", "ratio"] = Field(
        "ratio",
        description="criterion total: what a truth needing more than under the balanced design costs; participants: "
        "3 of the mean per participant over; ratio: 3 times the mean balanced need per 100 % over, whatever the "
        "truth's own need (protects truths the balanced design identifies with the minimum)",
    )
    temperature: float = Field(0.5, gt=0, description="smooth minimum over pairs, in z units")
    max_exchanges: int = Field(200, ge=0, description="exchange steps after greedy selection")

    _range = field_validator("noise_sd", "gain")(lambda bounds: ordered_range(bounds))

    @field_validator("shared_sd", mode="before")
    @classmethod
    def _shared_sd(cls, value: Any) -> float | Literal["fit"]:
        if value == "fit":
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if not number >= 0:
            raise UserError(f"{value!r} is neither a number >= 0 (logit units) nor 'fit'")
        return number

    @model_validator(mode="after")
    def _pilot(self) -> DesignPlan:
        if (self.pilot_ratings is None) != (self.pilot_model_responses is None):
            raise UserError("plan.pilot_ratings and plan.pilot_model_responses go together: pass both or neither")
        return self


class PreviousBatch(Options):
    bundle: str = Field(description="an earlier batch's bundle (studies/<name>/v<k>)")
    responses: str = Field(description="that batch's responses.csv (the study server's export)")


class AdaptiveSettings(Options):
    previous: list[PreviousBatch] = Field(default_factory=list, description="earlier batches; []: batch 1")
    screen_alpha: float = Field(
        0.05, gt=0, lt=1, description="a model stays a candidate truth unless this significantly below the leader"
    )
    interim_alpha: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="each interim look (before every batch after the first) stops the study when one model is "
        "above every other at this alpha; spent out of plan.alpha, the final test gets the rest; 0: no early stop",
    )
    n_resamples: int = Field(
        100_000, ge=1000, description="bootstrap resamples of the screen and the interim look (analyze.py's default)"
    )
