"""What the researcher's live monitor shows (``/monitor``): who started, who is where, who finished or left, who
is flagged, and how fast answers arrive, read from the database in a few aggregate queries.

It is polled every few seconds while participants answer, so it never walks the answers in Python: per-participant
counts come from ``GROUP BY`` queries (the fast-trial floor is applied in SQL, with ``quality.is_fast``'s rule), only
attention checks' ratings are read (a handful per participant), answers per minute are counted in SQL, and the time
per trial is the median of the last ``window_minutes``' latest ``MEDIAN_OF`` answers (a 1,000-participant study
stores some 50,000 answers in five minutes, too many to fetch every few seconds). The flags use the export's
thresholds and rules (``quality.too_fast``, ``quality.attention_failed``), so a participant flagged here is flagged
in ``participants.csv``; the export's other flags (straight lining, refused answers) need every rating and are left
to it.

Prolific does not tell the server that someone returned a submission, so "returned or abandoned" means: not
completed and silent for ``abandoned_after_minutes`` (no consent, no answer).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from sqlalchemy import DateTime, bindparam, text
from sqlalchemy.orm import Session

from controversial.study.bundle import StudyBundle
from controversial.study.pnas_export import attention_passed, subject_for_id
from controversial.study.quality import QualitySettings, attention_failed, too_fast
from controversial.study.server.options import MonitorSettings

MONITOR_FLAGS = ("too_fast", "attention_failed", "pid_conflict", "browser_changed")
MAX_LISTED = 100  # participants in progress listed by name; the counts cover everyone


_PARTICIPANTS = text(
    "SELECT id, prolific_pid, consented_at IS NOT NULL, completed_at IS NOT NULL, n_answered, n_trials, "
    "last_activity_s, created_at, completed_at, n_browser_changes, screened_out FROM participants WHERE study = :study"
).columns(created_at=DateTime(timezone=True), completed_at=DateTime(timezone=True))  # typed: SQLite returns text
_FAST = text(
    "SELECT r.participant_id, COUNT(*), SUM(CASE WHEN r.rt_ms < :floor OR r.interval_ms < :floor THEN 1 ELSE 0 END) "
    "FROM responses r JOIN participants p ON p.id = r.participant_id WHERE p.study = :study GROUP BY r.participant_id"
)
_ATTENTION = text(
    "SELECT r.participant_id, r.stimulus_id, r.ratings_json FROM responses r JOIN participants p "
    "ON p.id = r.participant_id WHERE p.study = :study AND r.kind = 'attention'"
)
_RECENT = (
    "FROM responses r JOIN participants p ON p.id = r.participant_id WHERE p.study = :study AND r.received_at >= :since"
)
_RECENT_COUNT = text(f"SELECT COUNT(*) {_RECENT}").bindparams(bindparam("since", type_=DateTime(timezone=True)))
_RECENT_TIMES = text(f"SELECT r.rt_ms {_RECENT} ORDER BY r.id DESC LIMIT :limit").bindparams(
    bindparam("since", type_=DateTime(timezone=True))
)
MEDIAN_OF = 2000  # the time per trial is the median of the window's latest answers, at most this many


@dataclass(frozen=True)
class InProgress:
    subject: str
    current_trial: int  # the next trial to answer, 1-based
    n_trials: int
    idle_s: float  # since the consent or the last answer


@dataclass(frozen=True)
class StudyStatus:
    """One reading of the study, as ``/admin/monitor.json`` sends it."""

    study: str
    started: int  # participant rows (arrivals with a Prolific id)
    not_consented: int  # arrived, not yet consented, still within the abandonment time
    in_progress: int
    completed: int
    screened_out: int  # told that their screen or calibration does not allow the study (display.degrees)
    abandoned: int  # returned or abandoned: silent for abandoned_after_minutes
    flags: dict[str, int]  # MONITOR_FLAGS -> participants raising it
    answers_total: int
    answers_per_minute: float
    median_trial_s: float | None  # over the window
    median_study_minutes: float | None  # completed participants, arrival to completion
    window_minutes: float
    abandoned_after_minutes: float
    in_progress_list: list[InProgress]
    refresh_s: float
    measured_utc: str

    def to_json(self) -> dict:
        return asdict(self)


def study_status(
    session: Session, bundle: StudyBundle, quality: QualitySettings, settings: MonitorSettings, now: float | None = None
) -> StudyStatus:
    """The monitor's figures for ``bundle``'s participants, read inside ``session``'s transaction."""
    now = time.time() if now is None else now
    study = {"study": bundle.label}
    rows = session.execute(_PARTICIPANTS, study).all()
    counts = dict.fromkeys(("not_consented", "in_progress", "completed", "screened_out", "abandoned"), 0)
    flagged: dict[str, set[int]] = {flag: set() for flag in MONITOR_FLAGS}
    listed: list[InProgress] = []
    pids: dict[str, int] = {}
    durations = []
    batch = bundle.batch  # a property that reads the provenance: once, not per participant
    for row in rows:
        pid_, prolific_pid, consented, completed, n_answered, n_trials, last_s, created, finished, changes, out = row
        pids[prolific_pid] = pids.get(prolific_pid, 0) + 1
        if changes:
            flagged["browser_changed"].add(pid_)
        if completed:
            counts["completed"] += 1
            durations.append((_aware(finished) - _aware(created)).total_seconds() / 60)
            continue
        if out:
            counts["screened_out"] += 1
            continue
        idle = now - (last_s if last_s is not None else _aware(created).timestamp())
        if idle > settings.abandoned_after_minutes * 60:
            counts["abandoned"] += 1
        elif not consented:
            counts["not_consented"] += 1
        else:
            counts["in_progress"] += 1
            listed.append(InProgress(subject_for_id(pid_, batch), n_answered + 1, n_trials, round(idle, 1)))
    shared = {p for p, n in pids.items() if n > 1}
    flagged["pid_conflict"] = {r[0] for r in rows if r[1] in shared}
    answers = 0
    for participant, n, n_fast in session.execute(_FAST, {**study, "floor": quality.min_trial_rt_ms}):
        answers += n
        if too_fast(int(n_fast or 0), n, quality):
            flagged["too_fast"].add(participant)
    checks: dict[int, list[bool]] = {}
    for participant, stimulus_id, ratings in session.execute(_ATTENTION, study):
        instructed = bundle.key[stimulus_id].instructed_class
        checks.setdefault(participant, []).append(
            attention_passed(json.loads(ratings), bundle.spec.categories, instructed)
        )
    flagged["attention_failed"] = {p for p, c in checks.items() if attention_failed(sum(c), len(c), quality)}
    since = datetime.fromtimestamp(now - settings.window_minutes * 60, timezone.utc)
    recent_count = session.execute(_RECENT_COUNT, {**study, "since": since}).scalar_one()
    recent = [rt for (rt,) in session.execute(_RECENT_TIMES, {**study, "since": since, "limit": MEDIAN_OF})]
    listed.sort(key=lambda p: p.idle_s, reverse=True)  # the longest silent first: the ones to look at
    return StudyStatus(
        study=bundle.label,
        started=len(rows),
        **counts,
        flags={flag: len(flagged[flag]) for flag in MONITOR_FLAGS},
        answers_total=answers,
        answers_per_minute=round(recent_count / settings.window_minutes, 1),
        median_trial_s=round(statistics.median(recent) / 1000, 2) if recent else None,
        median_study_minutes=round(statistics.median(durations), 1) if durations else None,
        window_minutes=settings.window_minutes,
        abandoned_after_minutes=settings.abandoned_after_minutes,
        in_progress_list=listed[:MAX_LISTED],
        refresh_s=settings.refresh_s,
        measured_utc=datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
    )


def _aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes (stored as UTC); PostgreSQL aware ones."""
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
