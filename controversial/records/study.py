"""A study bundle's trial list and private key, and the study server's export tables.

The responses export is the PNAS long format (``responses.HUMAN_COLUMNS``); ``attention.csv`` holds
one row per attention check, ``participants.csv`` one row per participant (payment and status).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Sequence

from controversial.records.csvfile import InputError, csv_text, open_rows, read_records, text
from controversial.records.responses import HUMAN_COLUMNS, SUBJECT_ALIASES


@dataclass(frozen=True)
class KeyEntry:
    """The private truth about one opaque stimulus id; condition columns are empty when not applicable."""

    stimulus_id: str
    kind: str  # one of study.bundle.KINDS
    image: str = ""  # original file name (records.names), e.g. abs_3_vs_vgg_7_seed0.png or MNIST_12_7.png
    model_a: str = ""
    model_b: str = ""
    class_a: str = ""
    class_b: str = ""
    class_a_name: str = ""
    class_b_name: str = ""
    true_class: str = ""  # natural and demo images
    instructed_class: str = ""  # attention checks: the category to rate 100%
    hard_score: str = ""
    origin: str = ""  # where the pixels came from (a stimulus PNG, or "<dataset> test #<index>")


@dataclass(frozen=True)
class TrialSpec:
    """One presentation in the trial list; the server shuffles these per participant."""

    stimulus_id: str
    kind: str  # one of study.bundle.TRIAL_KINDS
    image_repetition: int = 0


KEY_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(KeyEntry))
TRIAL_LIST_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(TrialSpec))
# The study server's export adds ``batch`` (the adaptive-study batch of the bundle version served; 1 otherwise).
RESPONSE_COLUMNS: tuple[str, ...] = (*HUMAN_COLUMNS, "batch")
ATTENTION_COLUMNS: tuple[str, ...] = ("subject", "position", "instructed_category", "passed", "ratings")
ATTENTION_REQUIRED: tuple[str, ...] = ("subject", "passed")  # what the analysis reads; the rest is for people
# The study server's quality-control figures per participant (study.quality); ``flags`` is ";"-joined.
QUALITY_COLUMNS: tuple[str, ...] = (
    "median_rt_ms",
    "n_fast_trials",
    "longest_identical_run",
    "n_refused_answers",
    "n_browser_changes",
    "flags",
)
PARTICIPANT_COLUMNS: tuple[str, ...] = (
    "subject",
    "prolific_pid",
    "study_id",
    "session_id",
    "status",
    "n_answered",
    "n_trials",
    "attention_passed",
    "attention_total",
    "created_utc",
    "completed_utc",
    "px_per_degree",  # a study sized in degrees (display.degrees): the participant's screen calibration
    "viewing_distance_mm",
    *QUALITY_COLUMNS,
)
QUALITY_REQUIRED: tuple[str, ...] = ("subject", "flags")  # what the analysis reads of participants.csv


def key_text(key: Sequence[KeyEntry]) -> str:
    """``key.csv`` as text."""
    return csv_text(KEY_COLUMNS, (astuple(e) for e in key))


def trial_list_text(trials: Sequence[TrialSpec]) -> str:
    """``trials.csv`` as text."""
    return csv_text(TRIAL_LIST_COLUMNS, (astuple(t) for t in trials))


def read_key(path: Path, error: type[Exception] = InputError) -> dict[str, KeyEntry]:
    """``key.csv``: stimulus id -> its private record."""
    return {
        r["stimulus_id"]: KeyEntry(**{c: r[c] for c in KEY_COLUMNS}) for _, r in read_records(path, KEY_COLUMNS, error)
    }


def read_trial_list(path: Path, error: type[Exception] = InputError) -> tuple[TrialSpec, ...]:
    """``trials.csv``: every presentation, ``image_repetition`` an integer."""
    trials = []
    for line, r in read_records(path, TRIAL_LIST_COLUMNS, error):
        try:
            trials.append(TrialSpec(r["stimulus_id"], r["kind"], int(r["image_repetition"])))
        except ValueError:
            raise error(
                f"{path}, row {line}, column 'image_repetition': {r['image_repetition']!r} is not an integer"
            ) from None
    return tuple(trials)


def read_attention(path: str | Path) -> dict[str, tuple[int, int]]:
    """Attention-check outcomes per participant, ``subject -> (passed, total)``, from ``attention.csv``."""
    path = Path(path)
    outcome: dict[str, tuple[int, int]] = {}
    for line, record in open_rows(path, ATTENTION_REQUIRED, SUBJECT_ALIASES):
        subject = text(path, line, record, "subject")
        passed = text(path, line, record, "passed").lower()
        if passed not in ("true", "false"):
            raise InputError(f"{path}, row {line}, column 'passed': {passed!r}; allowed: true, false")
        ok, total = outcome.get(subject, (0, 0))
        outcome[subject] = (ok + (passed == "true"), total + 1)
    return outcome


def read_quality_flags(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Quality-control flags per participant, ``subject -> flags``, from the study server's
    ``participants.csv`` (``flags`` is a ``;``-separated list, empty when none was raised)."""
    path = Path(path)
    return {
        text(path, line, record, "subject"): tuple(f for f in (record.get("flags") or "").split(";") if f)
        for line, record in open_rows(path, QUALITY_REQUIRED, SUBJECT_ALIASES)
    }
