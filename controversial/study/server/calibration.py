"""The screen calibration of a study sized in degrees (``display.degrees``): the page posts the virtual chinrest's
measurements, the server decides (``study/calibration.py``), stores them with the participant and, when they
screen the participant out, says why; the preview gets the same decision with nothing stored."""

from __future__ import annotations

import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import select

from controversial.study.calibration import screen, screening
from controversial.study.db import Participant, token_digest
from controversial.study.schemas import CalibrationRequest
from controversial.study.server.state import DB, ApiError, Server, ServerDep, reply

log = logging.getLogger(__name__)
router = APIRouter()


def _degrees(server: Server) -> float:
    degrees = server.bundle.spec.display_degrees
    if degrees is None:
        raise ApiError(409, "this study shows its images in pixels (display.degrees is not set): no calibration")
    return degrees


@router.post("/api/sessions/{token}/calibration")
def calibrate(token: str, body: CalibrationRequest, server: ServerDep, session: DB) -> JSONResponse:
    """Store the measurements and the decision; a screened-out participant stays screened out."""
    degrees = _degrees(server)
    participant = session.scalar(
        select(Participant).where(
            Participant.token_hash == token_digest(token), Participant.study == server.bundle.label
        )
    )
    if participant is None:
        raise ApiError(404, "unknown session: reload the study from the Prolific link")
    if participant.consented_at is None or participant.completed_at is not None:
        raise ApiError(409, "the calibration comes after consent and before the first trial")
    if participant.screened_out is None:
        decision = screen(body, degrees)
        participant.px_per_degree = body.px_per_degree
        participant.viewing_distance_mm = body.viewing_distance_mm
        participant.screened_out = decision.screened_out
        session.commit()
        if decision.screened_out:
            log.info("participant %s screened out: %s", participant.id, decision.screened_out)
        return reply(decision.to_json())
    size = degrees * (participant.px_per_degree or 0.0)
    return reply(screening(participant.screened_out, size, participant.viewing_distance_mm or 0.0).to_json())


@router.post("/api/preview/calibration")
def preview_calibration(body: CalibrationRequest, server: ServerDep) -> JSONResponse:
    """The decision a participant with these measurements would get; nothing is stored."""
    return reply(screen(body, _degrees(server)).to_json())
