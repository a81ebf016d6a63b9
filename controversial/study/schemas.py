"""Request bodies of the collection API, validated strictly: unknown fields and coerced types are refused.

Checks that need the study (categories, allowed rating values, the participant's stored order)
live in ``server.py``; everything here is study-independent.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

PROLIFIC_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_RT_MS = 24 * 3600 * 1000.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionRequest(_Strict):
    """Arrival from Prolific: the three URL parameters it appends to the study link."""

    prolific_pid: str = Field(pattern=PROLIFIC_ID_PATTERN, description="PROLIFIC_PID URL parameter")
    study_id: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,64}$", description="STUDY_ID URL parameter")
    session_id: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,64}$", description="SESSION_ID URL parameter")


class ConsentRequest(_Strict):
    """Consent given, with the browser and screen check's measurements (stored for exclusions)."""

    consent: bool
    browser: dict[str, Any] = Field(default_factory=dict)

    @field_validator("browser")
    @classmethod
    def _small(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(repr(value)) > 4000:
            raise ValueError("browser check data is limited to 4000 characters")
        return value


class ResponseRequest(_Strict):
    """One answered trial: ten ratings keyed by category name, and two reaction times in ms."""

    position: StrictInt = Field(ge=1, description="1-based place of the trial in this participant's order")
    stimulus_id: str = Field(min_length=1, max_length=64)
    ratings: dict[str, StrictInt]
    rt_ms: StrictFloat | StrictInt = Field(ge=0, le=MAX_RT_MS)
    first_reaction_rt_ms: StrictFloat | StrictInt = Field(ge=0, le=MAX_RT_MS)
