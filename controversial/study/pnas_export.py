"""Database -> the PNAS long format (one row per trial x category) that ``analyze.py`` reads, plus the
attention-check and participant (quality-control) tables.

Conventions: ``subject`` is a pseudonymous code (``P0001``; ``B2_P0001`` in an adaptive study's batch 2;
``participants.csv`` maps it to the Prolific ID for payment); ``batch`` (a column after the PNAS ones)
is the adaptive-study batch of the bundle version served; ``trial`` numbers the rated stimulus trials
1..n in presentation order, skipping attention checks, which are left out of this file and reported in
``attention.csv``; reaction times are in milliseconds; only completed participants are exported unless asked.

Tables are produced as row iterators that hold one participant's answers at a time, and
``records.csvfile.csv_chunks`` turns them into text pieces, so an export of any size streams in bounded memory.
Run all three inside one read transaction to get one consistent snapshot.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime
from itertools import groupby
from typing import Callable, Iterator, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controversial.records.csvfile import Text
from controversial.records.study import ATTENTION_COLUMNS, PARTICIPANT_COLUMNS, RESPONSE_COLUMNS
from controversial.study.bundle import StudyBundle
from controversial.study.db import Participant, Response, make_engine, make_read_engine, session_factory
from controversial.study.quality import QualitySettings, TrialRecord, assess

_BATCH = 2000  # responses fetched per round trip while streaming


@contextmanager
def snapshot(database_url: str) -> Iterator[Session]:
    """One read-only transaction on the database: every table read inside it sees the same answers, and a
    running server keeps writing meanwhile (``make_read_engine``)."""
    engine = make_engine(database_url)
    reader = make_read_engine(database_url, engine)
    try:
        with session_factory(reader)() as session, session.begin():
            yield session
    finally:
        reader.dispose()
        engine.dispose()


def subject_code(participant: Participant, batch: int = 1) -> str:
    """``P0001``; later batches of an adaptive study ``B2_P0001``, so their exports pool as batches."""
    return subject_for_id(participant.id, batch)


def subject_for_id(participant_id: int, batch: int = 1) -> str:
    """``subject_code`` of the participant row with this id (for readers that select ids, not rows)."""
    return f"P{participant_id:04d}" if batch == 1 else f"B{batch}_P{participant_id:04d}"


def _rating(value: int) -> str:
    return f"{value / 100:g}"


def _ms(value: float) -> str:
    return f"{value:.0f}"


def attention_passed(ratings: Sequence[int], categories: Sequence[str], instructed: str) -> bool:
    """Passed = 100% for the instructed category and 0% for every other one, as the check asks."""
    return all(r == (100 if c == instructed else 0) for c, r in zip(categories, ratings, strict=True))


def _answers(session: Session, bundle: StudyBundle) -> Iterator[tuple[Participant, list[Response]]]:
    """Every participant of this study version with their answers in position order, one at a time."""
    participants = session.scalars(
        select(Participant).where(Participant.study == bundle.label).order_by(Participant.id)
    ).all()
    responses = session.scalars(
        select(Response)
        .join(Participant)
        .where(Participant.study == bundle.label)
        .order_by(Response.participant_id, Response.position)
        .execution_options(yield_per=_BATCH)
    )
    grouped = groupby(responses, key=lambda r: r.participant_id)
    pending = next(grouped, None)
    for participant in participants:
        answered: list[Response] = []
        if pending is not None and pending[0] == participant.id:
            answered = list(pending[1])
            pending = next(grouped, None)
        yield participant, answered


def response_rows(session: Session, bundle: StudyBundle, include_incomplete: bool = False) -> Iterator[list]:
    """``responses.csv``: rated trials x categories (attention checks left out)."""
    categories = bundle.spec.categories
    for participant, answered in _answers(session, bundle):
        if participant.completed_at is None and not include_incomplete:
            continue
        code = subject_code(participant, bundle.batch)
        stimulus_trial, count = {}, 0
        for position, entry in enumerate(json.loads(participant.order_json), start=1):
            if entry[1] == "stimulus":  # [stimulus_id, kind, image_repetition, presentation id]
                count += 1
                stimulus_trial[position] = count
        for response in answered:
            if response.kind == "attention":
                continue
            entry = bundle.key[response.stimulus_id]
            targets = (
                [entry.model_a, entry.model_b, entry.class_a_name, entry.class_b_name]
                if entry.kind == "controversial"
                else ["", "", "", ""]
            )
            for category, value in zip(categories, json.loads(response.ratings_json), strict=True):
                yield [
                    code,
                    entry.image,
                    response.image_repetition,
                    category,
                    *targets,
                    _rating(value),
                    _ms(response.first_reaction_rt_ms),
                    _ms(response.rt_ms),
                    stimulus_trial[response.position],
                    bundle.batch,
                ]


def attention_rows(session: Session, bundle: StudyBundle) -> Iterator[list]:
    """``attention.csv``: one row per answered attention check."""
    for participant, answered in _answers(session, bundle):
        for response in answered:
            if response.kind == "attention":
                ratings = json.loads(response.ratings_json)
                instructed = bundle.key[response.stimulus_id].instructed_class
                ok = attention_passed(ratings, bundle.spec.categories, instructed)
                yield [
                    subject_code(participant, bundle.batch),
                    response.position,
                    instructed,
                    str(ok).lower(),
                    " ".join(map(str, ratings)),
                ]


def _records(bundle: StudyBundle, answered: Sequence[Response]) -> list[TrialRecord]:
    records = []
    for response in answered:
        ratings = tuple(json.loads(response.ratings_json))
        passed = (
            attention_passed(ratings, bundle.spec.categories, bundle.key[response.stimulus_id].instructed_class)
            if response.kind == "attention"
            else None
        )
        records.append(TrialRecord(ratings, response.rt_ms, response.interval_ms, passed))
    return records


def _utc(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""


def participant_rows(session: Session, bundle: StudyBundle, quality: QualitySettings) -> Iterator[list]:
    """``participants.csv``: ids for payment, status, and the quality-control figures and flags."""
    shared = set(
        session.scalars(
            select(Participant.prolific_pid)
            .where(Participant.study == bundle.label)
            .group_by(Participant.prolific_pid)
            .having(func.count() > 1)
        )
    )
    for participant, answered in _answers(session, bundle):
        q = assess(
            _records(bundle, answered),
            quality,
            participant.n_refused,
            participant.n_browser_changes,
            participant.prolific_pid in shared,
        )
        yield [
            subject_code(participant, bundle.batch),
            Text(participant.prolific_pid),  # ids stay text: a pilot's "-1e5" is no number
            Text(participant.prolific_study_id),
            Text(participant.prolific_session_id),
            _status(participant),
            len(answered),
            participant.n_trials,
            q.attention_passed,
            q.attention_total,
            _utc(participant.created_at),
            _utc(participant.completed_at),
            _number(participant.px_per_degree),
            _number(participant.viewing_distance_mm),
            "" if q.median_rt_ms is None else _ms(q.median_rt_ms),
            q.n_fast,
            q.longest_identical_run,
            participant.n_refused,
            participant.n_browser_changes,
            ";".join(q.flags),
        ]


STATUSES = ("completed", "in_progress", "not_consented", "screened_out")  # participants.csv's status


def _status(participant: Participant) -> str:
    if participant.completed_at is not None:
        return "completed"
    if participant.screened_out is not None:
        return "screened_out"  # told that the screen calibration does not allow the study; never completes
    return "in_progress" if participant.consented_at else "not_consented"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


# name -> (columns, rows(session, bundle, include_incomplete, quality)); the columns are records.study's
TABLES: dict[str, tuple[tuple[str, ...], Callable[[Session, StudyBundle, bool, QualitySettings], Iterator[list]]]] = {
    "responses.csv": (RESPONSE_COLUMNS, lambda s, b, inc, _: response_rows(s, b, inc)),
    "attention.csv": (ATTENTION_COLUMNS, lambda s, b, _, __: attention_rows(s, b)),
    "participants.csv": (PARTICIPANT_COLUMNS, lambda s, b, _, q: participant_rows(s, b, q)),
}
