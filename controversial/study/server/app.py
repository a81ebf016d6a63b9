"""``create_app``: one study version's bundle, database and limits loaded once, the routers, and the
middleware every response passes through (outermost first): security headers (errors included), the
generic reply to unexpected errors, and the request-body limit."""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from controversial.errors import UserError
from controversial.study.admin_token import check_admin_token
from controversial.study.bundle import load_bundle
from controversial.study.db import default_database_url, is_in_memory, make_engine, make_read_engine, session_factory
from controversial.study.group_commit import GroupCommitWriter
from controversial.study.guards import BodyLimit, RateLimiter, SecurityHeaders, ServerErrors
from controversial.study.log_throttle import LogThrottle
from controversial.study.network_limits import NetworkLimiter
from controversial.study.presentations import PresentedImages
from controversial.study.server import admin, calibration, monitor, participant, preview, static
from controversial.study.server.options import ServeStudySettings
from controversial.study.server.state import NO_STORE, Server

log = logging.getLogger(__name__)


def create_app(settings: ServeStudySettings, admin_token: str | None = None) -> FastAPI:
    """The app for ``settings.study_dir``; ``admin_token`` (>= 32 random characters, from ``admin_token.py``)
    enables ``/admin/*``, None disables it."""
    server = load_server(settings, admin_token)
    app = FastAPI(
        title=f"controversial study {server.bundle.label}",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
    )
    app.state.server = server
    app.state.bundle, app.state.engine, app.state.sessions = server.bundle, server.engine, server.sessions
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)  # innermost
    app.add_middleware(ServerErrors)
    app.add_middleware(SecurityHeaders)  # outermost: every response, a 500 included
    # Starlette types every handler as taking any Exception; this one is registered for its own class only.
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    # monitor before admin: its /admin/monitor.json would otherwise match admin's /admin/{name}
    routers = (participant.router, calibration.router, preview.router, monitor.router, admin.router, static.router)
    for router in routers:
        app.include_router(router)
    static.mount_files(app, server)
    return app


def load_server(settings: ServeStudySettings, admin_token: str | None) -> Server:
    """Check the deployment's choices, load the bundle and open the database (created on first start)."""
    if not (settings.completion_code or "").strip():
        raise UserError("completion_code is empty: copy the completion code from your study's page on Prolific")
    if settings.study_dir is None:
        raise UserError("study_dir is required: a bundle written by export_study.py")
    if admin_token is not None:
        check_admin_token(admin_token)
    bundle = load_bundle(settings.study_dir)
    database_url = settings.database_url or default_database_url(bundle.root)
    if is_in_memory(database_url):
        raise UserError(
            f"database_url={database_url}: an in-memory database loses every answer when the server stops, and the "
            "admin export (a separate process) cannot read it; use a file (the default) or a database server"
        )
    engine = make_engine(database_url)
    limits = settings.rate_limit
    server = Server(
        settings=settings,
        bundle=bundle,
        database_url=database_url,
        engine=engine,
        sessions=session_factory(engine),
        writer=GroupCommitWriter(engine, client_errors=(HTTPException,)),
        admin_token=admin_token,
        session_starts=NetworkLimiter(
            limits.sessions_per_minute, limits.burst, limits.ipv6_prefixes, limits.ipv6_widening
        ),
        new_participants=RateLimiter(limits.new_participants_per_minute, limits.new_participants_burst),
        refusal_log=LogThrottle(),
        images=PresentedImages(bundle, make_read_engine(database_url, engine)),
        has_vendor=(settings.vendor_path / "jspsych" / "dist").is_dir(),
    )
    _warn(server, settings.vendor_path)
    return server


def _warn(server: Server, vendor: Path) -> None:
    if not server.has_vendor:
        log.warning("jsPsych not found under %s: run `npm ci` in human_study/ before serving participants", vendor)
    if server.bundle.spec.pilot:
        log.warning(
            "%s is a PILOT bundle (placeholder consent or instruction text): not for real participants",
            server.bundle.label,
        )
    if server.settings.allow_test_ids:
        log.warning("allow_test_ids is on: any made-up PROLIFIC_PID is accepted (pilots and tests only)")


async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
    """422 naming each invalid field and what is wrong with it, never echoing the input."""
    parts = []
    for item in error.errors():
        location = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
        parts.append(f"{location}: {item.get('msg', 'invalid')}")
    return JSONResponse({"detail": "; ".join(parts)}, status_code=422, headers=NO_STORE)
