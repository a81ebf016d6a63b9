"""The researcher's live monitor: ``/monitor`` (a page with no data in it) and ``/admin/monitor.json`` (the
figures, ``study/monitor.py``), which like every ``/admin`` route answers only to the admin token.

The page cannot send a bearer token on navigation, so it holds none: it asks for the token (or reads it from
the link's ``#fragment``, which browsers never send to a server), keeps it in the tab's ``sessionStorage``,
and sends it on each request for figures and on the export buttons' downloads. Without the token it shows
the form and nothing else. It is served with the same headers and Content-Security-Policy as every page.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse
from sqlalchemy.engine import Engine

from controversial.study.db import make_read_engine, session_factory
from controversial.study.monitor import study_status
from controversial.study.server.state import NO_STORE, ApiError, Server, ServerDep, reply, require_admin

PAGE_DIR = Path(__file__).resolve().parent / "monitor_page"
PAGE_FILES = {"monitor.js": "text/javascript", "monitor.css": "text/css"}
router = APIRouter()
_reader_lock = threading.Lock()


@router.get("/monitor")
def monitor_page() -> FileResponse:
    return FileResponse(PAGE_DIR / "index.html", media_type="text/html", headers=NO_STORE)


@router.get("/monitor/{name}")
def monitor_file(name: str) -> FileResponse:
    if name not in PAGE_FILES:
        raise ApiError(404, "no such file")
    return FileResponse(PAGE_DIR / name, media_type=PAGE_FILES[name], headers=NO_STORE)


@router.get("/admin/monitor.json", dependencies=[Depends(require_admin)])
def monitor_figures(request: Request, server: ServerDep) -> JSONResponse:
    """The figures, read in one snapshot through the read-only engine (a plain ``def``: FastAPI runs it in a
    worker thread, off the event loop that answers participants)."""
    with session_factory(_reader(request, server))() as session, session.begin():
        status = study_status(session, server.bundle, server.settings.quality, server.settings.monitor)
    return reply(status.to_json())


def _reader(request: Request, server: Server) -> Engine:
    """One read engine per app, made on first use (for SQLite a separate pool that never takes the write lock)."""
    with _reader_lock:
        reader = getattr(request.app.state, "monitor_reader", None)
        if reader is None:
            reader = request.app.state.monitor_reader = make_read_engine(server.database_url, server.engine)
        return reader
