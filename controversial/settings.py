"""Option groups still waiting for a home beside the code that owns them.

Every other option group lives with its code (``controversial/options.py`` says how), and each command's
settings schema in its task module (``controversial/tasks/<command>.py``).
"""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controversial.options import Count, Fraction, Options as Settings, Probability, Seed, one_of, ordered_range
from controversial.zoo.train_settings import AUGMENTATION_NAMES, TrainSettings


class TrainOptions(Settings):
    method: str = Field("supervised", description="training method (a key of zoo.training.TRAINING_METHODS)")
    epochs: int = Field(3, ge=0, description="passes over the training set (0: methods without epochs)")
    batch_size: Count = Field(128, description="images per optimisation step")
    lr: float = Field(1e-3, gt=0, description="learning rate")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    seed: Seed = 0
    max_shift: int = Field(0, ge=0, description="random translation augmentation, in pixels")
    augment: str = Field("shift", description=f"how max_shift is applied: {', '.join(AUGMENTATION_NAMES)}")
    extra: dict[str, Any] = Field(default_factory=dict, description="method-specific settings")

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        # Imported here, not at the top: the registry needs torch (and families may add to it), while
        # commands that never train or load a model (the study server) read these settings too.
        from controversial.zoo.training import TRAINING_METHODS

        return one_of(value, TRAINING_METHODS)

    @field_validator("augment")
    @classmethod
    def _known_augment(cls, value: str) -> str:
        return one_of(value, AUGMENTATION_NAMES)

    def typed(self) -> TrainSettings:
        return TrainSettings(**self.model_dump())


class OptimizerSettings(BaseModel):
    """Any torch.optim class by ``_target_``; the other keys are its keyword arguments."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    target: str = Field(alias="_target_", description="optimizer class, e.g. torch.optim.Adam")
    lr: float = Field(gt=0, description="learning rate of the image parameters")

    @field_validator("target")
    @classmethod
    def _importable(cls, value: str) -> str:
        module, _, name = value.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise ValueError(f"{value!r} is not an importable class; e.g. torch.optim.Adam") from None
        return value

    def factory(self) -> partial:
        """``factory(params)`` builds the optimizer."""
        module, _, name = self.target.rpartition(".")
        return partial(getattr(importlib.import_module(module), name), lr=self.lr, **(self.model_extra or {}))


class SynthesisOptions(Settings):
    sharpness: float = Field(
        1.0, gt=0, description="LogSumExp sharpness of the smooth score (the paper's alpha in Eq. 4)"
    )
    max_steps: Count = Field(1000, description="optimisation steps per attempt at most")
    patience: int = Field(10, ge=0, description="converged after more than this many quiet steps ...")
    tolerance_levels: float = Field(
        0.5, ge=0, description="... in which no pixel moves more than this many 8-bit levels"
    )
    threshold: Probability = Field(0.75, description="accept when the hard score of the 8-bit image reaches this")
    stop_score: Probability | None = Field(0.9, description="stop an image early at this hard score; null: never")
    stall_steps: Count | None = Field(
        None, description="stop an image whose watched score has not gained stall_gain in this many steps; null: never"
    )
    stall_gain: float = Field(0.01, gt=0, description="the gain in the watched score that resets the stall count")
    stall_on: Literal["hard", "smooth"] = Field(
        "hard", description="the watched score: hard (Eq. 2, a probability) | smooth (Eq. 4, in logit units)"
    )
    parametrization: Literal["pixel", "fourier"] = Field(
        "pixel", description="pixel (sigmoid) | fourier (decorrelated)"
    )
    fourier_decay: float = Field(1.0, ge=0, description="spectral decay of the Fourier parametrisation")
    jitter: int = Field(0, ge=0, description="random circular shift of up to this many pixels per step")


class DesignBudget(Settings):
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
            raise ValueError(
                f"natural_candidates_per_class={self.natural_candidates_per_class} is below natural_per_class="
                f"{self.natural_per_class}: the design needs at least as many candidates as it chooses"
            )
        if self.trials <= self.n_repeats + self.n_attention:
            raise ValueError(
                f"trials={self.trials} leaves no rated stimuli after {self.n_repeats} repeats and "
                f"{self.n_attention} attention checks"
            )
        return self


class DesignPlan(Settings):
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
            raise ValueError(f"{value!r} is neither a number >= 0 (logit units) nor 'fit'")
        return number

    @model_validator(mode="after")
    def _pilot(self) -> DesignPlan:
        if (self.pilot_ratings is None) != (self.pilot_model_responses is None):
            raise ValueError("plan.pilot_ratings and plan.pilot_model_responses go together: pass both or neither")
        return self


class PreviousBatch(Settings):
    bundle: str = Field(description="an earlier batch's bundle (studies/<name>/v<k>)")
    responses: str = Field(description="that batch's responses.csv (the study server's export)")


class AdaptiveSettings(Settings):
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


class ExportCsvSettings(Settings):
    out_dir: str | None = Field(None, description="where mode=export writes its CSV files; null: the run dir")
    include_incomplete: bool = Field(False, description="also export participants who did not finish")


class RateLimitSettings(Settings):
    sessions_per_minute: float = Field(10, gt=0, description="POST /api/session per client address (token bucket)")
    burst: Count = Field(20, description="bucket size")


class QualityControlSettings(Settings):
    min_trial_rt_ms: float = Field(1500, ge=0, description='a trial is "fast" below this many milliseconds')
    max_fast_fraction: Fraction = Field(0.1, description="too_fast: more than this fraction of trials are fast")
    max_identical_run: Count = Field(10, description="straight_lining: this many consecutive identical ratings")
    min_attention_passed: Fraction = Field(1.0, description="attention_failed: passed fraction below this")


class ServeStudySettings(Settings):
    mode: Literal["serve", "export", "token"] = Field(
        "serve", description="serve the study, export the database as CSV, or write a new admin token file"
    )
    study_dir: str | None = Field(None, description="a bundle written by export_study.py (not needed for mode=token)")
    database_url: str | None = Field(None, description="null: sqlite:///<study_dir>/responses.db")
    completion_code: str | None = Field(None, description="from Prolific (default: $PROLIFIC_COMPLETION_CODE)")
    completion_url_template: str = Field(description="where finished participants are sent; {code} is replaced")
    admin_token_file: str | None = Field(
        None, description="file holding the admin token (else $STUDY_ADMIN_TOKEN; neither: /admin/* disabled)"
    )
    allow_test_ids: bool = Field(False, description="accept made-up Prolific ids (pilots, tests); never on Prolific")
    max_body_bytes: Count = Field(16384, description="larger request bodies get 413")
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    quality: QualityControlSettings = Field(default_factory=QualityControlSettings)
    host: str = Field("127.0.0.1", description="listen address; keep loopback behind a reverse proxy")
    port: int = Field(8000, ge=1, le=65535, description="listen port")
    forwarded_allow_ips: str = Field("127.0.0.1", description="the proxy's address, trusted for X-Forwarded-*")
    access_log: bool = Field(False, description="log every request")
    vendor_dir: str | None = Field(None, description="jsPsych from `npm ci`; null: human_study/node_modules")
    export: ExportCsvSettings = Field(default_factory=ExportCsvSettings)

    @model_validator(mode="after")
    def _bundle(self) -> ServeStudySettings:
        if self.mode != "token" and not self.study_dir:
            raise ValueError(f"study_dir is required for mode={self.mode}: a bundle written by export_study.py")
        return self
