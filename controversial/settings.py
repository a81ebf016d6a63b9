"""Option groups still waiting for a home beside the code that owns them.

Every other option group lives with its code (``controversial/options.py`` says how), and each command's
settings schema in its task module (``controversial/tasks/<command>.py``).
"""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controversial.options import Count, Fraction, Options as Settings, Probability, Seed, one_of
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
