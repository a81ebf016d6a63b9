"""Who gets which participant row: the resume policy of ``POST /api/session`` (``docs/human_study.md``).

A participant row is bound to a Prolific submission, the pair (PROLIFIC_PID, SESSION_ID): the PID is
printed on the participant's profile and can be typed by anyone, while the SESSION_ID is random and
carried only by the participant's own study link. So an arrival

- with a browser's ``token`` resumes the row that token belongs to (its PID must match);
- with a stored (PID, SESSION_ID) and no token continues that submission in this browser (the first
  browser's token is revoked, counted as a browser change);
- with anything else gets a new row, even when the PID is already in use under another SESSION_ID: a PID
  claimed first by someone else is never locked away from its owner, who starts their own row; the export
  flags every row of a PID held by more than one submission (``pid_conflict``) and lists each row's
  SESSION_ID, which the researcher matches against the submissions Prolific lists. The reply is the same
  for a PID seen before and a new one, so it tells no one whether a PID has taken part.
"""

from __future__ import annotations

import json
import logging
import math
import random
import secrets
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controversial.study.calibration import screening
from controversial.study.db import Participant, Response, token_digest
from controversial.study.order import participant_order
from controversial.study.presentations import new_order, store_presentations
from controversial.study.schemas import SessionRequest
from controversial.study.server.state import NO_STORE, ApiError, Server

log = logging.getLogger(__name__)
_cap_warned = [float("-inf")]  # when the study-wide cap on new rows was last reported


def progress(server: Server, session: Session, participant: Participant, token: str | None) -> dict[str, Any]:
    """What the browser is told on arrival: the remaining trials (one shape for every kind), or completion."""
    if participant.completed_at is not None:
        return {
            "status": "completed",
            "redirect_url": server.settings.completion_url,
            "message": "You have already completed this study. Thank you!",
        }
    if participant.screened_out is not None:
        degrees = server.bundle.spec.display_degrees or 0.0
        size = degrees * (participant.px_per_degree or 0.0)
        return screening(participant.screened_out, size, participant.viewing_distance_mm or 0.0).to_json()
    order = json.loads(participant.order_json)
    done = set(session.scalars(select(Response.position).where(Response.participant_id == participant.id)))
    remaining = [  # each place under its own id (``presentations.py``); the bundle's ids stay private
        {"position": i, "stimulus_id": shown, "image_url": f"images/{shown}.png"}
        for i, (_, _, _, shown) in enumerate(order, start=1)
        if i not in done
    ]
    reply: dict[str, Any] = {
        "status": "in_progress",
        "token": token,
        "consented": participant.consented_at is not None,
        "n_total": len(order),
        "n_done": len(done),
        "trials": remaining,
    }
    if server.bundle.spec.display_degrees is not None:  # a study sized in degrees: the stored calibration, if any
        reply["px_per_degree"] = participant.px_per_degree
    return reply


def arrive(server: Server, session: Session, body: SessionRequest, quiet: bool) -> tuple[Participant, str | None]:
    """The participant row for this arrival and the token to hand this browser (None: nothing to hand);
    ``quiet``: the client's networks made no other start lately, so a new row may draw on the reserve."""
    if body.token:
        participant = _holding_token(server, session, body)
        if participant is not None:
            return participant, body.token
    participant = _submission(server, session, body)
    if participant is None:
        participant, token = _create(server, session, body, quiet)
        if participant is not None:
            return participant, token
        participant = _submission(server, session, body)  # the same submission arrived twice at once
        if participant is None:
            raise RuntimeError("a new participant row was refused as a duplicate, yet no duplicate is stored")
    return participant, _move_to_this_browser(session, participant)


def _holding_token(server: Server, session: Session, body: SessionRequest) -> Participant | None:
    """The row this browser's token opens for this PID; a new SESSION_ID (the person took the study up again
    on Prolific) is recorded unless another row of the PID already holds it or the row is complete (a completed
    row is frozen: its token rewrote the SESSION_ID, and the real link then made a second row)."""
    participant = session.scalar(
        select(Participant).where(
            Participant.token_hash == token_digest(body.token or ""),
            Participant.study == server.bundle.label,
            Participant.prolific_pid == body.prolific_pid,
        )
    )
    if participant is None:
        return None
    if participant.completed_at is not None:  # frozen: a completed submission is never re-bound
        return participant
    if body.session_id and body.session_id != participant.prolific_session_id:
        participant.prolific_session_id = body.session_id
        try:
            session.commit()
            log.warning("participant %s resumed in the same browser under a new SESSION_ID", participant.id)
        except IntegrityError:
            session.rollback()
            participant = session.get(Participant, participant.id)
    return participant


def _submission(server: Server, session: Session, body: SessionRequest) -> Participant | None:
    return session.scalar(
        select(Participant).where(
            Participant.study == server.bundle.label,
            Participant.prolific_pid == body.prolific_pid,
            Participant.prolific_session_id == body.session_id,
        )
    )


def _create(
    server: Server, session: Session, body: SessionRequest, quiet: bool
) -> tuple[Participant | None, str | None]:
    """A new row with a fresh order, within the study-wide limit on new rows (its reserve only for ``quiet``
    networks); (None, None) if the same submission was stored by a concurrent request."""
    limits = server.settings.rate_limit
    reserve = 0.0 if quiet else limits.new_participants_reserve * limits.new_participants_burst
    wait = server.new_participants.retry_after("study", keep=reserve)
    if wait:
        if time.monotonic() - _cap_warned[0] >= 60:  # one line a minute, not one per refused request
            _cap_warned[0] = time.monotonic()
            log.warning("new participants arrive faster than rate_limit.new_participants_per_minute; refused with 429")
        raise ApiError(
            429,
            "the study is receiving many new participants right now; please try again in a minute",
            headers={"Retry-After": str(math.ceil(wait)), **NO_STORE},
        )
    token = secrets.token_urlsafe(32)
    order = participant_order(server.bundle.trials, random.Random(secrets.randbits(64)), server.settings.min_repeat_gap)
    order_json, presentations = new_order(order)
    participant = Participant(
        study=server.bundle.label,
        prolific_pid=body.prolific_pid,
        prolific_study_id=body.study_id,
        prolific_session_id=body.session_id,
        token_hash=token_digest(token),
        order_json=order_json,
        n_trials=len(order),
    )
    session.add(participant)
    try:
        session.flush()  # the row's id, for its presentations; a duplicate submission fails here
        store_presentations(session, participant.id, presentations)
        session.commit()
    except IntegrityError:
        session.rollback()
        return None, None
    log.info("new participant %s (%d trials)", participant.id, len(order))
    return participant, token


def _move_to_this_browser(session: Session, participant: Participant) -> str | None:
    """The same submission in another browser (or with cleared storage): a new token, the old one revoked."""
    if participant.completed_at is not None:
        return None
    token = secrets.token_urlsafe(32)
    participant.token_hash = token_digest(token)
    participant.n_browser_changes += 1
    session.commit()
    log.warning("participant %s continued in another browser; the earlier browser's token is revoked", participant.id)
    return token
