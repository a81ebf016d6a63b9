"""The researcher's preview: ``/?preview=1`` walks through the whole study (consent, practice, every trial in a
fresh order, the end page) without a Prolific id and without a participant row.

``GET /api/preview`` hands the page an order drawn like a participant's, stored nowhere; the page sends no
answer and never redirects to Prolific, and every page shows a "preview" banner. It needs no token: it shows
what any participant sees and stores nothing, and it is rate-limited like study starts.
"""

from __future__ import annotations

import math
import random
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from controversial.study.guards import client_key
from controversial.study.order import participant_order
from controversial.study.server.state import NO_STORE, ApiError, ServerDep, reply

router = APIRouter()


@router.get("/api/preview")
def preview(request: Request, server: ServerDep) -> JSONResponse:
    """The shape of ``POST /api/session``'s reply for a new participant, with ``preview`` set and no token."""
    host = request.client.host if request.client else "unknown"
    wait = server.session_starts.retry_after(client_key(host, server.settings.rate_limit.ipv6_prefix))
    if wait:
        raise ApiError(
            429, "too many previews; try again in a minute", {"Retry-After": str(math.ceil(wait)), **NO_STORE}
        )
    rng = random.Random(secrets.randbits(64))
    order = participant_order(server.bundle.trials, rng, server.settings.min_repeat_gap)
    trials = [
        {"position": i, "stimulus_id": t.stimulus_id, "image_url": f"images/{t.stimulus_id}.png"}
        for i, t in enumerate(order, start=1)
    ]
    return reply(
        {
            "status": "in_progress",
            "preview": True,
            "token": None,
            "consented": False,
            "n_total": len(trials),
            "n_done": 0,
            "trials": trials,
            "redirect_url": server.settings.completion_url,
        }
    )
