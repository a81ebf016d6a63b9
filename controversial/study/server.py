"""The collection server: a FastAPI app serving one study bundle version and storing every answer.

Guarantees: each participant's order is generated once and stored, so a reload resumes where they
were; a response is committed before the reply, so an acknowledged answer is never lost; the
database's unique keys make re-submission idempotent and an answer is never overwritten (a
different answer for an answered trial is refused and counted); invalid input gets a 4xx with a
message that names the field and what is allowed, and stores nothing; participants never see a
stack trace or anything from the private key.

A session belongs to the browser that started it: ``POST /api/session`` hands the browser a secret
(its token) once, and gives it again only to a browser that presents it, or, as a documented
resume policy built on Prolific's ids, to another browser arriving with the same SESSION_ID (the
same Prolific submission), which revokes the first browser's token. A PROLIFIC_PID alone never
opens someone's session. API and threat model: ``docs/human_study.md``.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import random
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterator

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response as HttpResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Connection, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controversial.study.admin_token import check_admin_token
from controversial.study.answers import NewAnswer, answering_participant, store_answer
from controversial.study.bundle import WEB_DIR, load_bundle
from controversial.study.db import (
    Participant,
    Response,
    default_database_url,
    is_in_memory,
    make_engine,
    session_factory,
    token_digest,
    utcnow,
)
from controversial.study.export_process import ExportFailed, ExportRequest, TableExport
from controversial.study.group_commit import GroupCommitWriter
from controversial.study.guards import BodyLimit, RateLimiter, SecurityHeaders
from controversial.study.order import participant_order
from controversial.study.pnas_export import TABLES
from controversial.study.quality import QualitySettings
from controversial.study.schemas import PROLIFIC_ID, ConsentRequest, ResponseRequest, SessionRequest

log = logging.getLogger(__name__)

PROLIFIC_COMPLETION_URL = "https://app.prolific.co/submissions/complete?cc={code}"
DEFAULT_VENDOR_DIR = Path(__file__).resolve().parents[2] / "human_study" / "node_modules"
_NO_STORE = {"Cache-Control": "no-store"}
UNKNOWN_SESSION = (
    "unknown session: it may have been continued in another browser; reload the study from the Prolific link"
)


@dataclass(frozen=True)
class ServerSettings:
    """What a deployment decides; ``completion_code`` comes from the study's page on Prolific."""

    bundle_dir: Path
    completion_code: str
    database_url: str | None = None  # default: SQLite file next to the bundle
    admin_token: str | None = None  # None disables the admin endpoints; else >= 32 random characters
    completion_url_template: str = PROLIFIC_COMPLETION_URL
    vendor_dir: Path = DEFAULT_VENDOR_DIR  # human_study/node_modules after `npm ci`
    min_repeat_gap: int = 10
    allow_test_ids: bool = False  # accept any [A-Za-z0-9_-]{1,64} instead of Prolific's 24-hex ids (pilots, tests)
    max_body_bytes: int = 16 * 1024  # an answer is about 300 bytes, consent with browser data under 5 kB
    sessions_per_minute: float = 10.0  # POST /api/session per client address, after a burst of ...
    session_burst: int = 20  # ... this many (participants behind one NAT share an address)
    quality: QualitySettings = field(default_factory=QualitySettings)

    @property
    def completion_url(self) -> str:
        return self.completion_url_template.format(code=self.completion_code)


class ApiError(HTTPException):
    """A client error whose message is safe and useful to show to the participant or researcher."""


def _db(request: Request) -> Iterator[Session]:
    """One database session per request (module level, so FastAPI can resolve the annotation)."""
    with request.app.state.sessions() as session:
        yield session


DB = Annotated[Session, Depends(_db)]


def _field_errors(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors():
        location = ".".join(str(p) for p in item.get("loc", ()) if p != "body") or "body"
        parts.append(f"{location}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def _client(request: Request) -> str:
    """The client's address (the proxy's X-Forwarded-For when uvicorn trusts the proxy)."""
    return request.client.host if request.client else "unknown"


def create_app(settings: ServerSettings) -> FastAPI:
    """Build the app for one bundle; the engines and the bundle are loaded once, here."""
    if not settings.completion_code.strip():
        raise ValueError("completion_code is empty: copy the completion code from your study's page on Prolific")
    if settings.admin_token is not None:
        check_admin_token(settings.admin_token)
    bundle = load_bundle(settings.bundle_dir)
    database_url = settings.database_url or default_database_url(bundle.root)
    if is_in_memory(database_url):
        raise ValueError(
            f"database_url={database_url}: an in-memory database loses every answer when the server stops, and the "
            "admin export (a separate process) cannot read it; use a file (the default) or a database server"
        )
    engine = make_engine(database_url)
    sessions = session_factory(engine)
    writer = GroupCommitWriter(engine, client_errors=(HTTPException,))
    limiter = RateLimiter(settings.sessions_per_minute, settings.session_burst)
    categories = bundle.spec.categories
    allowed_ratings = set(bundle.spec.rating_levels)
    allowed_text = ", ".join(str(v) for v in bundle.spec.rating_levels)
    has_vendor = (settings.vendor_dir / "jspsych" / "dist").is_dir()
    if not has_vendor:
        log.warning(
            "jsPsych not found under %s: run `npm ci` in human_study/ before serving participants", settings.vendor_dir
        )
    if bundle.spec.pilot:
        log.warning(
            "%s is a PILOT bundle (placeholder consent or instruction text): not for real participants", bundle.label
        )
    if settings.allow_test_ids:
        log.warning("allow_test_ids is on: any made-up PROLIFIC_PID is accepted (pilots and tests only)")

    app = FastAPI(title=f"controversial study {bundle.label}", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.bundle = bundle
    app.state.engine = engine
    app.state.sessions = sessions
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _field_errors(error)}, status_code=422, headers=_NO_STORE)

    @app.exception_handler(Exception)
    async def _crash(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"detail": "internal server error; your earlier answers are saved, please retry"},
            status_code=500,
            headers=_NO_STORE,
        )

    def participant_for(session: Session, token: str) -> Participant:
        participant = session.scalar(
            select(Participant).where(Participant.token_hash == token_digest(token), Participant.study == bundle.label)
        )
        if participant is None:
            raise ApiError(404, UNKNOWN_SESSION)
        return participant

    def public_trial(position: int, stimulus_id: str) -> dict[str, Any]:
        """A trial as the browser sees it: the same shape for every kind, an opaque id and an image."""
        return {"position": position, "stimulus_id": stimulus_id, "image_url": f"images/{stimulus_id}.png"}

    def state(session: Session, participant: Participant, token: str | None) -> dict[str, Any]:
        if participant.completed_at is not None:
            return {
                "status": "completed",
                "redirect_url": settings.completion_url,
                "message": "You have already completed this study. Thank you!",
            }
        order = json.loads(participant.order_json)
        done = set(session.scalars(select(Response.position).where(Response.participant_id == participant.id)))
        remaining = [public_trial(i, sid) for i, (sid, _, _) in enumerate(order, start=1) if i not in done]
        return {
            "status": "in_progress",
            "token": token,
            "consented": participant.consented_at is not None,
            "n_total": len(order),
            "n_done": len(done),
            "trials": remaining,
        }

    def check_ids(body: SessionRequest) -> None:
        if settings.allow_test_ids:
            return
        wrong = [
            f"{name}: {value!r} is not a Prolific id (24 lower-case hex digits)"
            for name, value in (
                ("prolific_pid", body.prolific_pid),
                ("study_id", body.study_id),
                ("session_id", body.session_id),
            )
            if not PROLIFIC_ID.match(value)
        ]
        if wrong:
            raise ApiError(422, "; ".join(wrong) + "; please open the study from its link on Prolific")

    @app.get("/api/health")
    def health() -> JSONResponse:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception:  # any driver error means the same thing to a load balancer
            log.exception("health check: database unreachable")
            return JSONResponse({"status": "error", "database": "unreachable"}, status_code=503, headers=_NO_STORE)
        return JSONResponse(
            {"status": "ok", "study": bundle.label, "batch": bundle.batch, "database": "ok", "web_assets": has_vendor},
            headers=_NO_STORE,
        )

    @app.get("/api/study")
    def study() -> JSONResponse:
        demos = [
            {"stimulus_id": t.stimulus_id, "image_url": f"images/{t.stimulus_id}.png"}
            for t in bundle.trials
            if t.kind == "demo"
        ]
        return JSONResponse(
            {
                "title": bundle.spec.title,
                "categories": list(categories),
                "rating_levels": list(bundle.spec.rating_levels),
                "demo_trials": demos,
            },
            headers=_NO_STORE,
        )

    @app.post("/api/session")
    def start_session(body: SessionRequest, request: Request, session: DB) -> JSONResponse:
        """Create the participant for this PROLIFIC_PID, or resume it under the policy in the module doc."""
        check_ids(body)
        wait = limiter.retry_after(_client(request))
        if wait:
            raise ApiError(
                429,
                "too many study starts from your network; please try again in a minute",
                headers={"Retry-After": str(math.ceil(wait)), **_NO_STORE},
            )
        query = select(Participant).where(
            Participant.study == bundle.label, Participant.prolific_pid == body.prolific_pid
        )
        participant = session.scalar(query)
        if participant is None:
            token = secrets.token_urlsafe(32)
            order = participant_order(bundle.trials, random.Random(secrets.randbits(64)), settings.min_repeat_gap)
            participant = Participant(
                study=bundle.label,
                prolific_pid=body.prolific_pid,
                prolific_study_id=body.study_id,
                prolific_session_id=body.session_id,
                token_hash=token_digest(token),
                order_json=json.dumps([[t.stimulus_id, t.kind, t.image_repetition] for t in order]),
                n_trials=len(order),
            )
            session.add(participant)
            try:
                session.commit()
                log.info("new participant %s (%d trials)", participant.id, len(order))
                return JSONResponse(state(session, participant, token), headers=_NO_STORE)
            except IntegrityError:  # the same PID arrived twice at once: the stored one wins, policy below
                session.rollback()
                participant = session.scalar(query)
                if participant is None:
                    raise
        if body.token and hmac.compare_digest(token_digest(body.token), participant.token_hash):
            if body.session_id and body.session_id != participant.prolific_session_id:
                log.warning("participant %s resumed in the same browser under a new SESSION_ID", participant.id)
                participant.prolific_session_id = body.session_id
                session.commit()
            return JSONResponse(state(session, participant, body.token), headers=_NO_STORE)
        if body.session_id and body.session_id == participant.prolific_session_id:
            token = None
            if participant.completed_at is None:  # the same submission in another browser: move the session
                token = secrets.token_urlsafe(32)
                participant.token_hash = token_digest(token)
                participant.n_browser_changes += 1
                session.commit()
                log.warning(
                    "participant %s continued in another browser; the earlier browser's token is revoked",
                    participant.id,
                )
            return JSONResponse(state(session, participant, token), headers=_NO_STORE)
        log.warning(
            "refused a session start for participant %s: no browser secret and another SESSION_ID", participant.id
        )
        raise ApiError(
            409,
            "this Prolific ID has already started this study in another browser; please continue "
            "there, or contact the researcher through Prolific",
        )

    @app.post("/api/sessions/{token}/consent")
    def consent(token: str, body: ConsentRequest, session: DB) -> JSONResponse:
        participant = participant_for(session, token)
        if body.consent is not True:
            raise ApiError(422, "consent: must be true to take part")
        if participant.consented_at is None:
            participant.consented_at = utcnow()
            participant.last_activity_s = time.time()
            participant.browser_json = json.dumps(body.browser)
            session.commit()
        return JSONResponse({"consented": True}, headers=_NO_STORE)

    def check_ratings(ratings: dict[str, int]) -> list[int]:
        unknown = [c for c in ratings if c not in categories]
        if unknown:
            raise ApiError(422, f"ratings: unknown category {unknown[0]!r}; categories are {', '.join(categories)}")
        missing = [c for c in categories if c not in ratings]
        if missing:
            raise ApiError(
                422,
                f"ratings: no rating for category {missing[0]!r}; all {len(categories)} "
                f"categories need one of {allowed_text}",
            )
        for category in categories:
            if ratings[category] not in allowed_ratings:
                raise ApiError(
                    422, f"ratings.{category}: {ratings[category]!r} is not allowed; allowed values: {allowed_text}"
                )
        return [ratings[c] for c in categories]

    @app.post("/api/sessions/{token}/responses")
    async def submit(token: str, body: ResponseRequest) -> JSONResponse:
        """Store one answered trial, committed before replying; a repeat of the same answer is a no-op."""
        token_hash = token_digest(token)

        def job(connection: Connection) -> tuple[str, int, int, int]:  # runs on the writer, in its batch
            participant = answering_participant(connection, bundle.label, token_hash)
            if participant is None:
                raise ApiError(404, UNKNOWN_SESSION)
            if participant.completed:
                raise ApiError(409, "this session is already complete; no more answers are accepted")
            if not participant.consented:
                raise ApiError(409, "consent has not been recorded for this session")
            order = participant.order
            if body.position > len(order):
                raise ApiError(422, f"position: must be between 1 and {len(order)}")
            if body.stimulus_id not in bundle.key:
                raise ApiError(422, f"stimulus_id: unknown stimulus {body.stimulus_id!r}")
            stimulus_id, kind, repetition = order[body.position - 1]
            if body.stimulus_id != stimulus_id:
                raise ApiError(
                    422,
                    f"stimulus_id: {body.stimulus_id!r} is not the stimulus at position {body.position} "
                    "of this session",
                )
            if body.first_reaction_rt_ms > body.rt_ms:
                raise ApiError(422, "first_reaction_rt_ms: must not exceed rt_ms")
            answer = NewAnswer(
                body.position,
                stimulus_id,
                kind,
                repetition,
                json.dumps(check_ratings(body.ratings)),
                float(body.rt_ms),
                float(body.first_reaction_rt_ms),
            )
            outcome = store_answer(connection, participant, answer, time.time())
            return outcome, participant.id, participant.n_answered + (outcome == "stored"), len(order)

        outcome, participant_id, n_done, n_total = await writer.run(job)
        if outcome == "refused":
            log.warning("participant %s: a different answer for position %d was refused", participant_id, body.position)
            raise ApiError(
                409, f"position {body.position} was already answered with different ratings; answers cannot be changed"
            )
        return JSONResponse(
            {"status": outcome, "n_done": n_done, "n_total": n_total},
            status_code=201 if outcome == "stored" else 200,
            headers=_NO_STORE,
        )

    @app.post("/api/sessions/{token}/complete")
    def complete(token: str, session: DB) -> JSONResponse:
        """Mark the session complete only when every trial is stored; then hand out the Prolific URL."""
        participant = participant_for(session, token)
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
        return JSONResponse({"status": "completed", "redirect_url": settings.completion_url}, headers=_NO_STORE)

    def require_admin(authorization: Annotated[str | None, Header()] = None) -> None:
        if not settings.admin_token:
            raise ApiError(403, "admin endpoints are disabled: start the server with an admin token")
        scheme, _, supplied = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.encode(), settings.admin_token.encode()):
            raise HTTPException(
                401,
                "admin token missing or wrong: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @app.get("/admin/{name}", dependencies=[Depends(require_admin)])
    async def admin_table(name: str, include_incomplete: Annotated[bool, Query()] = False) -> StreamingResponse:
        """Stream one export table from a read-only snapshot, built in a child process (export_process.py)
        so that participants' answers never wait for it."""
        if name not in TABLES:
            raise ApiError(404, f"no such export {name!r}; available: {', '.join(TABLES)}")
        request = ExportRequest(str(bundle.root), database_url, name, include_incomplete, settings.quality)
        try:
            export = await TableExport.start(request)
        except ExportFailed as error:
            raise ApiError(500, f"export failed: {error}") from None
        return StreamingResponse(
            export.chunks(),
            media_type="text/csv",
            headers={**_NO_STORE, "Content-Disposition": f'attachment; filename="{name}"'},
        )

    @app.get("/images/{stimulus_id}.png")
    def image(stimulus_id: str) -> HttpResponse:
        """Image bytes with no validators: ETag and Last-Modified would expose file metadata."""
        if stimulus_id not in bundle.key or not bundle.image_path(stimulus_id).is_file():
            raise ApiError(404, "no such image")
        return HttpResponse(
            bundle.image_path(stimulus_id).read_bytes(),
            media_type="image/png",
            headers={"Cache-Control": "private, max-age=86400"},
        )

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(bundle.root / WEB_DIR / "index.html", headers=_NO_STORE)

    app.mount("/static", StaticFiles(directory=bundle.root / WEB_DIR), name="static")
    if has_vendor:
        app.mount("/vendor", StaticFiles(directory=settings.vendor_dir), name="vendor")
    return app
