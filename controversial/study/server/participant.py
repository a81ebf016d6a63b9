"""The participant's API: the study's public config, arrival, consent, one answer at a time, completion.

Every body is a strict pydantic model (``schemas.py``) under the app-wide body limit (``guards.BodyLimit``);
a session is named by its secret token in the path, and an unknown or revoked token is a 404.
"""

from __future__ import annotations

import json
import logging
import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from controversial.study.answers import NewAnswer, answering_participant, store_answer
from controversial.study.db import Participant, Response, token_digest, utcnow
from controversial.study.schemas import ConsentRequest, ResponseRequest
from controversial.study.server.sessions import arrive, progress
from controversial.study.server.state import (
    DB,
    ApiError,
    Arrival,
    Server,
    ServerDep,
    client_host,
    limit_session_starts,
    reply,
)

log = logging.getLogger(__name__)
router = APIRouter()
UNKNOWN_SESSION = (
    "unknown session: it may have been continued in another browser; reload the study from the Prolific link"
)


@router.get("/api/health")
def health(server: ServerDep) -> JSONResponse:
    try:
        with server.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception:  # any driver error means the same thing to a load balancer
        log.exception("health check: database unreachable")
        return reply({"status": "error", "database": "unreachable"}, 503)
    bundle = server.bundle
    ok = {"status": "ok", "study": bundle.label, "batch": bundle.batch, "database": "ok"}
    return reply({**ok, "web_assets": server.has_vendor})


@router.get("/api/study")
def study(server: ServerDep) -> JSONResponse:
    spec = server.bundle.spec
    demos = [
        {"stimulus_id": t.stimulus_id, "image_url": f"images/{t.stimulus_id}.png"}
        for t in server.bundle.trials
        if t.kind == "demo"
    ]
    return reply(
        {
            "title": spec.title,
            "categories": list(spec.categories),
            "rating_levels": list(spec.rating_levels),
            "demo_trials": demos,
            "display_degrees": spec.display_degrees,  # null: images at display_size CSS pixels
            "display_size": spec.display_size,
        }
    )


@router.post("/api/session", dependencies=[Depends(limit_session_starts)])
def start_session(body: Arrival, server: ServerDep, session: DB, request: Request) -> JSONResponse:
    """Create or resume the participant row of this Prolific submission (policy: ``sessions.py``)."""
    quiet = server.session_starts.quiet(client_host(request))
    participant, token = arrive(server, session, body, quiet)
    return reply(progress(server, session, participant, token))


def _participant(server: Server, session: Session, token: str) -> Participant:
    participant = session.scalar(
        select(Participant).where(
            Participant.token_hash == token_digest(token), Participant.study == server.bundle.label
        )
    )
    if participant is None:
        raise ApiError(404, UNKNOWN_SESSION)
    return participant


@router.post("/api/sessions/{token}/consent")
def consent(token: str, body: ConsentRequest, server: ServerDep, session: DB) -> JSONResponse:
    participant = _participant(server, session, token)
    if body.consent is not True:
        raise ApiError(422, "consent: must be true to take part")
    if participant.consented_at is None:
        participant.consented_at = utcnow()
        participant.last_activity_s = time.time()
        participant.browser_json = json.dumps(body.browser)
        session.commit()
    return reply({"consented": True})


def _ratings(server: Server, ratings: dict[str, int]) -> str:
    """The ratings in the study's category order (JSON), or a 422 naming the first wrong category."""
    spec = server.bundle.spec
    categories, allowed = spec.categories, ", ".join(str(v) for v in spec.rating_levels)
    unknown = [c for c in ratings if c not in categories]
    if unknown:
        raise ApiError(422, f"ratings: unknown category {unknown[0]!r}; categories are {', '.join(categories)}")
    missing = [c for c in categories if c not in ratings]
    if missing:
        raise ApiError(
            422,
            f"ratings: no rating for category {missing[0]!r}; all {len(categories)} categories need one of {allowed}",
        )
    for category in categories:
        if ratings[category] not in spec.rating_levels:
            raise ApiError(422, f"ratings.{category}: {ratings[category]!r} is not allowed; allowed values: {allowed}")
    return json.dumps([ratings[c] for c in categories])


def _answer(
    server: Server, connection: Connection, token_hash: str, body: ResponseRequest
) -> tuple[str, int, int, int]:
    """Check one answer against the session's stored order and store it (runs on the writer, in its batch)."""
    participant = answering_participant(connection, server.bundle.label, token_hash)
    if participant is None:
        raise ApiError(404, UNKNOWN_SESSION)
    if participant.completed:
        raise ApiError(409, "this session is already complete; no more answers are accepted")
    if not participant.consented:
        raise ApiError(409, "consent has not been recorded for this session")
    order = participant.order
    if body.position > len(order):
        raise ApiError(422, f"position: must be between 1 and {len(order)}")
    stimulus_id, kind, repetition, shown = order[body.position - 1]
    if body.stimulus_id != shown:  # the id this place was served under, never the bundle's
        raise ApiError(
            422, f"stimulus_id: {body.stimulus_id!r} is not the image shown at position {body.position} of this session"
        )
    if body.first_reaction_rt_ms > body.rt_ms:
        raise ApiError(422, "first_reaction_rt_ms: must not exceed rt_ms")
    ratings = _ratings(server, body.ratings)
    rt_ms, first_ms = float(body.rt_ms), float(body.first_reaction_rt_ms)
    answer = NewAnswer(body.position, stimulus_id, kind, repetition, ratings, rt_ms, first_ms)
    outcome = store_answer(connection, participant, answer, time.time())
    return outcome, participant.id, participant.n_answered + (outcome == "stored"), len(order)


@router.post("/api/sessions/{token}/responses")
async def submit(token: str, body: ResponseRequest, server: ServerDep) -> JSONResponse:
    """Store one answered trial, committed before replying; a repeat of the same answer is a no-op."""
    token_hash = token_digest(token)
    outcome, participant_id, n_done, n_total = await server.writer.run(
        lambda connection: _answer(server, connection, token_hash, body)
    )
    if outcome == "refused":
        held = server.refusal_log.due(participant_id)  # one line a minute per session, with the count since
        if held:
            log.warning(
                "participant %s: %d different answer(s) for answered positions refused (the latest for position %d)",
                participant_id,
                held,
                body.position,
            )
        raise ApiError(
            409, f"position {body.position} was already answered with different ratings; answers cannot be changed"
        )
    status = 201 if outcome == "stored" else 200
    return reply({"status": outcome, "n_done": n_done, "n_total": n_total}, status)


@router.post("/api/sessions/{token}/complete")
def complete(token: str, server: ServerDep, session: DB) -> JSONResponse:
    """Mark the session complete only when every trial is stored; then hand out the Prolific URL."""
    participant = _participant(server, session, token)
    if participant.screened_out is not None:
        raise ApiError(409, f"this session was screened out ({participant.screened_out}) and cannot be completed")
    if server.bundle.spec.display_degrees is not None and participant.px_per_degree is None:
        raise ApiError(409, "this study needs the screen calibration before it can be completed")
    if participant.completed_at is None:
        done = set(session.scalars(select(Response.position).where(Response.participant_id == participant.id)))
        missing = [i for i in range(1, participant.n_trials + 1) if i not in done]
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            raise ApiError(
                409, f"{len(missing)} trial(s) not stored yet (positions {shown}); answer them before completing"
            )
        participant.completed_at = utcnow()
        session.commit()
        log.info("participant %s completed", participant.id)
    return reply({"status": "completed", "redirect_url": server.settings.completion_url})
