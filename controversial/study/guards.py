"""HTTP-level protection of the study server: a request-body limit, security headers, a generic reply to
unexpected errors, the masking of session tokens in logs, as plain ASGI middleware, and a small token bucket
for rate limits (``network_limits.py`` applies it per client network; no extra dependency).

The body limit lives in the app, not only in the reverse proxy, so a misconfigured or absent proxy
cannot let a few large bodies exhaust memory: a declared ``Content-Length`` over the limit is refused
before anything is read, and a chunked body is counted while it arrives and refused the moment it
passes the limit. The headers are set on every response, errors included: unexpected errors are
answered by ``ServerErrors``, which sits inside ``SecurityHeaders`` (Starlette's own error handler sits
outside every middleware, so a 500 it wrote went out bare).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import Any, Awaitable, Callable, MutableMapping

from controversial.errors import UserError
from controversial.study.csp_styles import STYLE_SRC_ATTR

# An ASGI scope or message is a dict whose values' types depend on their keys (bytes pairs under "headers",
# an int under "status"), which a Mapping type cannot say: Any, as in asgiref's and Starlette's own aliases.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger(__name__)
SERVER_ERROR = "internal server error; your earlier answers are saved, please retry"
_SESSION_PATH = re.compile(r"(/api/sessions/)[^/?\s\"]+")

# The page loads only its own scripts, styles and images and talks only to its own origin. No inline style
# either: the pages style elements through classes in human_study/src/style.css or through the CSSOM
# (element.style.x = ..., which style-src does not govern), and use no jsPsych plugin in a way that writes a
# style="" attribute (experiment.js); tests/study/test_browser_csp.py visits every page and counts violations.
# The one exception: the exact style attributes of the screen calibration's plugin, by hash (``csp_styles.py``).
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src 'self'; style-src 'self'; {STYLE_SRC_ATTR}; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = tuple(
    (k.encode(), v.encode())
    for k, v in (
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
        ("permissions-policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()"),
    )
)


async def _reply(send: Send, status: int, detail: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"connection", b"close"),
                *SECURITY_HEADERS,
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, reading at most ``max_bytes`` + one chunk."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_big = f"request body larger than {self.max_bytes} bytes; answers are a few hundred bytes"
        headers: dict[bytes, bytes] = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _reply(send, 413, too_big)
            return
        chunks: list[bytes] = []
        size = 0
        while True:  # buffer the (small) body, so the endpoint never sees more than the limit
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _reply(send, 413, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for a disconnect, as the server would
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def mask_session_tokens(text: str) -> str:
    """``text`` with every session token in an API path replaced: a log line never holds a live secret."""
    return _SESSION_PATH.sub(r"\1<token>", text)


class MaskTokens(logging.Filter):
    """Mask session tokens in a log record's message and arguments (uvicorn's access log writes paths)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = mask_session_tokens(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(mask_session_tokens(a) if isinstance(a, str) else a for a in record.args)
        return True


class ServerErrors:
    """Answer an unexpected error with a generic 500 (the stack trace and the masked path go to the log only).

    An error after the response has begun is re-raised, so the server breaks the transfer: the client sees
    a broken download, never a table that silently ends early."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), mask_session_tokens(str(scope.get("path"))))
            if started:
                raise
            await _reply(send, 500, SERVER_ERROR)


class SecurityHeaders:
    """Add ``SECURITY_HEADERS`` to every HTTP response, and ``Cache-Control: no-store`` to every error that
    does not say otherwise (an error may name a session or a participant's progress)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept: list[tuple[bytes, bytes]] = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() not in names
                ]
                if message["status"] >= 400 and not any(k.lower() == b"cache-control" for k, _ in kept):
                    kept.append((b"cache-control", b"no-store"))
                message["headers"] = kept + list(SECURITY_HEADERS)
            await send(message)

        await self.app(scope, receive, with_headers)


class RateLimiter:
    """A token bucket per client key: ``burst`` requests at once, then ``per_minute`` a minute.

    In memory and per process (one server process serves one study), bounded: idle buckets, which
    are full again, are forgotten when the table grows past ``max_clients``.
    """

    def __init__(
        self, per_minute: float, burst: int, max_clients: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if per_minute <= 0 or burst < 1:
            raise UserError(f"rate limit: per_minute={per_minute} must be > 0 and burst={burst} at least 1")
        self.rate, self.burst, self.max_clients, self.clock = per_minute / 60.0, float(burst), max_clients, clock
        self.buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last update)
        self.lock = threading.Lock()

    def retry_after(self, key: str, keep: float = 0.0, take: bool = True) -> float:
        """Take one request for ``key`` (only look, without ``take``): 0 if allowed, else the seconds until one is
        allowed; ``keep`` tokens stay in the bucket for others (a reserve this request may not touch)."""
        now = self.clock()
        with self.lock:
            tokens = self.tokens(key, now)
            if tokens >= 1 + keep:
                if take:
                    self.buckets[key] = (tokens - 1, now)
                    if len(self.buckets) > self.max_clients:
                        self._forget_idle(now)
                return 0.0
            return (1 + keep - tokens) / self.rate

    def tokens(self, key: str, now: float | None = None) -> float:
        """What ``key``'s bucket holds now (full for a key not seen)."""
        now = self.clock() if now is None else now
        tokens, last = self.buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def _forget_idle(self, now: float) -> None:
        full_after = self.burst / self.rate
        for key in [k for k, (_, last) in self.buckets.items() if now - last >= full_after]:
            del self.buckets[key]
