"""The page and its files: ``/``, the display images, ``/static`` (the experiment) and ``/vendor`` (jsPsych).

Only files are served, never a listing or a redirect: the app is built with ``redirect_slashes=False``,
so ``/static`` with a forged ``Host`` header is a 404, not a redirect to that host.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

from controversial.study.bundle import WEB_DIR
from controversial.study.server.state import NO_STORE, ApiError, Server, ServerDep

router = APIRouter()


@router.get("/")
def index(server: ServerDep) -> FileResponse:
    return FileResponse(server.bundle.root / WEB_DIR / "index.html", headers=NO_STORE)


@router.get("/images/{image_id}.png")
def image(image_id: str, server: ServerDep) -> Response:
    """A practice image, or the image of one presentation (``presentations.py``), with no validators: ETag and
    Last-Modified would expose file metadata."""
    data = server.images.png(image_id)
    if data is None:
        raise ApiError(404, "no such image")
    return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=86400"})


def mount_files(app: FastAPI, server: Server) -> None:
    """The experiment's files, and jsPsych when ``npm ci`` has installed it."""
    app.mount("/static", StaticFiles(directory=server.bundle.root / WEB_DIR), name="static")
    if server.has_vendor:
        app.mount("/vendor", StaticFiles(directory=server.settings.vendor_path), name="vendor")
