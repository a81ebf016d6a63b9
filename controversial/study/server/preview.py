"""The researcher's preview: ``/?preview=1`` walks through the whole study (consent, practice, every trial in a
fresh order, the end page) without a Prolific id and without a participant row.

``GET /api/preview`` hands the page an order drawn like a participant's, stored nowhere: each place gets a random
id that only this process's memory maps to its stimulus (``PreviewImages``, bounded), so a preview never shows a
bundle's stimulus ids either. The page sends no answer and never redirects to Prolific, and every page shows a
"preview" banner. It needs no token: it shows what any participant sees and stores nothing in the database, and
it is rate-limited like study starts.
"""

from __future__ import annotations

import math
import random
import secrets
import threading
from collections import OrderedDict

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from controversial.study.order import participant_order
from controversial.study.server.state import NO_STORE, ApiError, ServerDep, client_host, reply

router = APIRouter()
MAX_PREVIEW_IMAGES = 20_000  # ids remembered, the oldest forgotten first: about a hundred previews


class PreviewImages:
    """Preview image id -> the bundle's stimulus id and, for an attention check, the seed it is drawn with (as a
    participant's is, ``presentations.py``), in memory only."""

    def __init__(self, capacity: int = MAX_PREVIEW_IMAGES) -> None:
        self.capacity, self.ids, self.lock = capacity, OrderedDict[str, tuple[str, int]](), threading.Lock()

    def add(self, stimulus_id: str) -> str:
        image_id = secrets.token_hex(8)
        with self.lock:
            self.ids[image_id] = (stimulus_id, secrets.randbits(62))
            while len(self.ids) > self.capacity:
                self.ids.popitem(last=False)
        return image_id

    def get(self, image_id: str) -> tuple[str, int] | None:
        with self.lock:
            return self.ids.get(image_id)


_made = threading.Lock()


def _images(request: Request) -> PreviewImages:
    with _made:
        if not hasattr(request.app.state, "preview_images"):
            request.app.state.preview_images = PreviewImages()
        return request.app.state.preview_images


@router.get("/api/preview")
def preview(request: Request, server: ServerDep) -> JSONResponse:
    """The shape of ``POST /api/session``'s reply for a new participant, with ``preview`` set and no token."""
    wait = server.session_starts.retry_after(client_host(request))  # the study starts' buckets, per network
    if wait:
        raise ApiError(
            429, "too many previews; try again in a minute", {"Retry-After": str(math.ceil(wait)), **NO_STORE}
        )
    order = participant_order(server.bundle.trials, random.Random(secrets.randbits(64)), server.settings.min_repeat_gap)
    images = _images(request)
    trials = []
    for position, trial in enumerate(order, start=1):
        image_id = images.add(trial.stimulus_id)
        trials.append(
            {"position": position, "stimulus_id": image_id, "image_url": f"api/preview/images/{image_id}.png"}
        )
    reply_body = {"status": "in_progress", "preview": True, "token": None, "consented": False, "n_done": 0}
    reply_body |= {"n_total": len(trials), "trials": trials, "redirect_url": server.settings.completion_url}
    if server.bundle.spec.display_degrees is not None:
        reply_body["px_per_degree"] = None
    return reply(reply_body)


@router.get("/api/preview/images/{image_id}.png")
def preview_image(image_id: str, request: Request, server: ServerDep) -> Response:
    found = _images(request).get(image_id)
    if found is None:
        raise ApiError(404, "no such image (a preview's images are forgotten after a while: reload the preview)")
    stimulus_id, seed = found
    if server.bundle.key[stimulus_id].kind == "attention":
        data = server.images.check(stimulus_id, seed)  # drawn like a participant's
    else:
        data = server.bundle.image_path(stimulus_id).read_bytes()
    return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})
