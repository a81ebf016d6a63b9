"""Storing one answered trial in plain SQL: the server's hot path.

Why not the ORM here: at 1,000 participants answering at a human pace (about 180 answers/s) the ORM's
session, identity map and unit-of-work flush cost more CPU than the rest of the request
(docs/human_study.md, section 7). An answer is one SELECT of the participant by token digest, one
``INSERT ... ON CONFLICT DO NOTHING`` and one UPDATE of the participant's counters, in the
transaction of the writer's batch (``group_commit.py``); the statements are the same on SQLite and
PostgreSQL. A conflicting insert is not an error (which would abort a PostgreSQL transaction and with
it the batch): the stored ratings are compared instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from sqlalchemy import Connection, DateTime, bindparam, text

_PARTICIPANT = text(
    "SELECT id, consented_at IS NOT NULL, completed_at IS NOT NULL, order_json, last_activity_s, n_answered "
    "FROM participants WHERE token_hash = :token_hash AND study = :study"
)
_INSERT = text(
    "INSERT INTO responses (participant_id, position, stimulus_id, kind, image_repetition, ratings_json, rt_ms, "
    "first_reaction_rt_ms, interval_ms, received_at) VALUES (:participant_id, :position, :stimulus_id, :kind, "
    ":image_repetition, :ratings_json, :rt_ms, :first_reaction_rt_ms, :interval_ms, :received_at) "
    "ON CONFLICT (participant_id, position) DO NOTHING"
).bindparams(bindparam("received_at", type_=DateTime(timezone=True)))
_COUNT_ANSWER = text(
    "UPDATE participants SET n_answered = n_answered + 1, last_activity_s = :now WHERE id = :participant_id"
)
_STORED_RATINGS = text(
    "SELECT ratings_json FROM responses WHERE participant_id = :participant_id AND position = :position"
)
_COUNT_REFUSAL = text("UPDATE participants SET n_refused = n_refused + 1 WHERE id = :participant_id")


@dataclass(frozen=True)
class AnsweringParticipant:
    """What the answer path needs of a participant: state, stored order, counters."""

    id: int
    consented: bool
    completed: bool
    order: list[tuple[str, str, int, str]]  # (stimulus_id, kind, image_repetition, presentation id) by position - 1
    last_activity_s: float | None
    n_answered: int


@dataclass(frozen=True)
class NewAnswer:
    """A validated answer for one position of a participant's order."""

    position: int
    stimulus_id: str
    kind: str
    image_repetition: int
    ratings_json: str  # the ten ratings in the study's category order
    rt_ms: float
    first_reaction_rt_ms: float


def answering_participant(connection: Connection, study: str, token_hash: str) -> AnsweringParticipant | None:
    """The participant holding this session secret in this study version, or None."""
    row = connection.execute(_PARTICIPANT, {"token_hash": token_hash, "study": study}).first()
    if row is None:
        return None
    pid, consented, completed, order_json, last_activity_s, n_answered = row
    order = [(sid, kind, repetition, shown) for sid, kind, repetition, shown in json.loads(order_json)]
    return AnsweringParticipant(pid, bool(consented), bool(completed), order, last_activity_s, n_answered)


def store_answer(
    connection: Connection, participant: AnsweringParticipant, answer: NewAnswer, now: float
) -> Literal["stored", "duplicate", "refused"]:
    """Insert the answer and count it; the same answer again is a no-op; a different one for an answered
    position is not stored and is counted as refused (data for quality control)."""
    last = participant.last_activity_s
    inserted = connection.execute(
        _INSERT,
        {
            "participant_id": participant.id,
            "position": answer.position,
            "stimulus_id": answer.stimulus_id,
            "kind": answer.kind,
            "image_repetition": answer.image_repetition,
            "ratings_json": answer.ratings_json,
            "rt_ms": answer.rt_ms,
            "first_reaction_rt_ms": answer.first_reaction_rt_ms,
            "interval_ms": None if last is None else round((now - last) * 1000.0, 1),
            "received_at": datetime.fromtimestamp(now, timezone.utc),
        },
    ).rowcount
    if inserted:
        connection.execute(_COUNT_ANSWER, {"now": now, "participant_id": participant.id})
        return "stored"
    stored = connection.execute(
        _STORED_RATINGS, {"participant_id": participant.id, "position": answer.position}
    ).scalar_one()
    if stored == answer.ratings_json:
        return "duplicate"
    connection.execute(_COUNT_REFUSAL, {"participant_id": participant.id})
    return "refused"
