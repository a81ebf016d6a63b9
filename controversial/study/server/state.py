"""What every route shares, built once by ``create_app`` and reached through FastAPI dependencies, and the
guards a route names in its signature (``require_admin``, ``prolific_arrival``, ``limit_session_starts``)."""

from __future__ import annotations

import hmac
import math
from dataclasses import dataclass
from typing import Annotated, Iterator

from fastapi import Depends, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from controversial.study.bundle import StudyBundle
from controversial.study.group_commit import GroupCommitWriter
from controversial.study.guards import RateLimiter
from controversial.study.log_throttle import LogThrottle
from controversial.study.network_limits import NetworkLimiter
from controversial.study.presentations import PresentedImages
from controversial.study.schemas import PROLIFIC_ID, SessionRequest
from controversial.study.server.options import ServeStudySettings

NO_STORE = {"Cache-Control": "no-store"}


class ApiError(HTTPException):
    """A client error whose message is safe and useful to show to the participant or researcher."""


@dataclass(frozen=True)
class Server:
    """One study version being served: its options, bundle, database and limits."""

    settings: ServeStudySettings
    bundle: StudyBundle
    database_url: str
    engine: Engine
    sessions: sessionmaker
    writer: GroupCommitWriter
    admin_token: str | None
    session_starts: NetworkLimiter  # POST /api/session per client network (IPv4 address, IPv6 /64, /56, /48)
    new_participants: RateLimiter  # new participant rows, whole study
    refusal_log: LogThrottle  # log lines about refused answers, per session and in all
    images: PresentedImages  # what each served image id shows
    has_vendor: bool


def reply(body: dict, status_code: int = 200) -> JSONResponse:
    """A JSON answer that no cache keeps (it holds a session token or a participant's progress)."""
    return JSONResponse(body, status_code=status_code, headers=NO_STORE)


async def _server(request: Request) -> Server:
    """Async, so FastAPI calls it on the event loop: a plain function would cost the answer path a thread hop."""
    return request.app.state.server


def _db(request: Request) -> Iterator[Session]:
    """One database session per request."""
    with request.app.state.server.sessions() as session:
        yield session


ServerDep = Annotated[Server, Depends(_server)]
DB = Annotated[Session, Depends(_db)]


def require_admin(server: ServerDep, authorization: Annotated[str | None, Header()] = None) -> None:
    """A bearer token equal to the configured one (compared in constant time); 403 when none is configured."""
    if not server.admin_token:
        raise ApiError(403, "admin endpoints are disabled: start the server with an admin token")
    scheme, _, supplied = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.encode(), server.admin_token.encode()):
        raise HTTPException(
            401,
            "admin token missing or wrong: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )


def prolific_arrival(body: SessionRequest, server: ServerDep) -> SessionRequest:
    """The arrival, if its ids have Prolific's format (24 lower-case hex digits) or test ids are allowed."""
    if server.settings.allow_test_ids:
        return body
    fields = (("prolific_pid", body.prolific_pid), ("study_id", body.study_id), ("session_id", body.session_id))
    wrong = [
        f"{name}: {value!r} is not a Prolific id (24 lower-case hex digits)"
        for name, value in fields
        if not PROLIFIC_ID.match(value)
    ]
    if wrong:
        raise ApiError(422, "; ".join(wrong) + "; please open the study from its link on Prolific")
    return body


Arrival = Annotated[SessionRequest, Depends(prolific_arrival)]


def client_host(request: Request) -> str:
    """The client's address (the proxy's X-Forwarded-For when ``forwarded_allow_ips`` trusts it)."""
    return request.client.host if request.client else "unknown"


def limit_session_starts(request: Request, server: ServerDep, _: Arrival) -> None:
    """429 past the token bucket of any network the client is in (counted after the ids are checked, so
    malformed ones cost nothing)."""
    wait = server.session_starts.retry_after(client_host(request))
    if wait:
        raise ApiError(
            429,
            "too many study starts from your network; please try again in a minute",
            headers={"Retry-After": str(math.ceil(wait)), **NO_STORE},
        )
