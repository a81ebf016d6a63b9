"""The options of ``serve_study.py``, declared once: the command validates them, ``create_app`` and the task
take them as they are. The admin token is not among them: it is a secret, read from a file or the
environment (``admin_token.py``) and handed to ``create_app`` beside the options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from controversial.errors import UserError
from controversial.options import Count, Fraction, Options
from controversial.study.quality import QualitySettings

PROLIFIC_COMPLETION_URL = "https://app.prolific.co/submissions/complete?cc={code}"
DEFAULT_VENDOR_DIR = Path(__file__).resolve().parents[3] / "human_study" / "node_modules"


class ExportCsvSettings(Options):
    out_dir: str | None = Field(None, description="where mode=export writes its CSV files; null: the run dir")
    include_incomplete: bool = Field(False, description="also export participants who did not finish")


class RateLimitSettings(Options):
    """Session starts per client network (participants behind one NAT share an address, hence the burst), and new
    participant rows for the whole study, whatever the addresses (``study/network_limits.py``)."""

    sessions_per_minute: float = Field(10, gt=0, description="POST /api/session per client address (token bucket)")
    burst: Count = Field(20, description="bucket size")
    ipv6_prefix: int = Field(
        64, ge=1, le=128, description="IPv6 clients are counted by this prefix (a subscriber gets at least a /64)"
    )
    ipv6_wider_prefixes: list[Annotated[int, Field(ge=1, le=127)]] = Field(
        default_factory=lambda: [56, 48],
        description="... and by these wider networks too (a subscriber may hold a /56 or a /48), each with ...",
    )
    ipv6_widening: float = Field(2.0, ge=1, description="... this many times the budget of the network inside it")
    new_participants_per_minute: float = Field(
        300, gt=0, description="new participant rows per minute for the whole study, after a burst of ..."
    )
    new_participants_burst: Count = Field(300, description="... this many")
    new_participants_reserve: Fraction = Field(
        0.25, description="share of that burst kept for arrivals from networks with no other recent start"
    )

    @property
    def ipv6_prefixes(self) -> list[int]:
        """Every IPv6 prefix a client is counted by, narrowest first (wider ones only: a listed prefix that is not
        shorter than ``ipv6_prefix`` names no wider network and is left out)."""
        return [self.ipv6_prefix, *sorted({p for p in self.ipv6_wider_prefixes if p < self.ipv6_prefix}, reverse=True)]


class MonitorSettings(Options):
    """The researcher's live monitor page (``/monitor``, behind the admin token)."""

    refresh_s: float = Field(5.0, ge=1, le=600, description="the page asks for new figures this often")
    abandoned_after_minutes: float = Field(
        30.0, gt=0, description="not completed and silent this long: counted as returned or abandoned"
    )
    window_minutes: float = Field(5.0, gt=0, description="answers per minute and time per trial over this window")


class ServeStudySettings(Options):
    mode: Literal["serve", "export", "token"] = Field(
        "serve", description="serve the study, export the database as CSV, or write a new admin token file"
    )
    study_dir: str | None = Field(None, description="a bundle written by export_study.py (not needed for mode=token)")
    database_url: str | None = Field(None, description="null: sqlite:///<study_dir>/responses.db")
    completion_code: str | None = Field(
        default_factory=lambda: os.environ.get("PROLIFIC_COMPLETION_CODE"),
        description="from Prolific (default: $PROLIFIC_COMPLETION_CODE)",
    )
    completion_url_template: str = Field(
        PROLIFIC_COMPLETION_URL, description="where finished participants are sent; {code} is replaced"
    )
    admin_token_file: str | None = Field(
        None, description="file holding the admin token (else $STUDY_ADMIN_TOKEN; neither: /admin/* disabled)"
    )
    allow_test_ids: bool = Field(False, description="accept made-up Prolific ids (pilots, tests); never on Prolific")
    max_body_bytes: Count = Field(16384, description="larger request bodies get 413")
    min_repeat_gap: int = Field(10, ge=0, description="trials between an image and its repeat, at least")
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    host: str = Field("127.0.0.1", description="listen address; keep loopback behind a reverse proxy")
    port: int = Field(8000, ge=1, le=65535, description="listen port")
    forwarded_allow_ips: str = Field("127.0.0.1", description="the proxy's address, trusted for X-Forwarded-*")
    access_log: bool = Field(False, description="log every request (session tokens in paths are masked)")
    vendor_dir: str | None = Field(None, description="jsPsych from `npm ci`; null: human_study/node_modules")
    export: ExportCsvSettings = Field(default_factory=ExportCsvSettings)

    @model_validator(mode="after")
    def _bundle(self) -> ServeStudySettings:
        if self.mode != "token" and not self.study_dir:
            raise UserError(f"study_dir is required for mode={self.mode}: a bundle written by export_study.py")
        return self

    @property
    def completion_url(self) -> str:
        return self.completion_url_template.format(code=self.completion_code)

    @property
    def vendor_path(self) -> Path:
        return Path(self.vendor_dir).resolve() if self.vendor_dir else DEFAULT_VENDOR_DIR
