"""Request bodies of the collection API, validated strictly: unknown fields and coerced types are refused.

Every model is ``strict``: a JSON string is never read as a number or a boolean (``"yes"`` is not
consent, ``"3"`` is not a position). Checks that need the study or the deployment (categories,
allowed rating values, the participant's stored order, Prolific's id format outside test mode)
live in the server (``server/participant.py``, ``server/state.py``); everything here is study-independent.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

# Prolific's PROLIFIC_PID, STUDY_ID and SESSION_ID are 24 lower-case hex digits (MongoDB object ids).
PROLIFIC_ID = re.compile(r"^[0-9a-f]{24}$")
# What test mode (``allow_test_ids``) accepts instead, e.g. "pilot-anna".
TEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_RT_MS = 24 * 3600 * 1000.0
# Free-form fields are flat and bounded by their type, so a nested or huge value is a 422 at validation and
# is never walked, printed or stored (a list nested 955 deep once crashed ``repr`` with a RecursionError).
MAX_NAME_LENGTH = 64  # a category name, a browser-data name
MAX_CATEGORIES = 256  # ratings per answer; the bundle refuses more categories (``bundle.check_categories``)
Key = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
BrowserValue = Annotated[StrictStr, Field(max_length=256)] | StrictInt | StrictFloat | StrictBool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SessionRequest(_Strict):
    """Arrival from Prolific (the three URL parameters it appends) plus the browser's session secret, if any."""

    prolific_pid: str = Field(pattern=TEST_ID.pattern, description="PROLIFIC_PID URL parameter")
    study_id: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,64}$", description="STUDY_ID URL parameter")
    session_id: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,64}$", description="SESSION_ID URL parameter")
    token: str | None = Field(default=None, max_length=128, description="the secret this browser was given before")


class ConsentRequest(_Strict):
    """Consent given (JSON ``true`` only), with the browser and screen check's measurements."""

    consent: StrictBool
    browser: dict[Key, BrowserValue] = Field(
        default_factory=dict, max_length=32, description="flat: at most 32 names with a text, number or boolean each"
    )


class ResponseRequest(_Strict):
    """One answered trial: ten ratings keyed by category name, and two reaction times in ms."""

    position: StrictInt = Field(ge=1, description="1-based place of the trial in this participant's order")
    stimulus_id: str = Field(min_length=1, max_length=64)
    ratings: dict[Key, StrictInt] = Field(max_length=MAX_CATEGORIES)
    rt_ms: StrictFloat | StrictInt = Field(ge=0, le=MAX_RT_MS)
    first_reaction_rt_ms: StrictFloat | StrictInt = Field(ge=0, le=MAX_RT_MS)


class CalibrationRequest(_Strict):
    """The virtual chinrest's measurements (``calibration.py``) and the window the study runs in, in CSS pixels."""

    px_per_degree: StrictFloat | StrictInt = Field(gt=0, le=10000)
    viewing_distance_mm: StrictFloat | StrictInt = Field(gt=0, le=100000)
    window_width: StrictInt = Field(ge=0, le=100000)
    window_height: StrictInt = Field(ge=0, le=100000)
