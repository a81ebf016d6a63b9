"""Option groups still waiting for a home beside the code that owns them.

Every other option group lives with its code (``controversial/options.py`` says how), and each command's
settings schema in its task module (``controversial/tasks/<command>.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from controversial.options import Count, Fraction, Options as Settings


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
