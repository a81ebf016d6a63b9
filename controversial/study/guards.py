"""HTTP-level protection of the study server: a request-body limit, security headers, and a per-client
rate limit, as plain ASGI middleware and a small token bucket (no extra dependency).

The body limit lives in the app, not only in the reverse proxy, so a misconfigured or absent proxy
cannot let a few large bodies exhaust memory: a declared ``Content-Length`` over the limit is refused
before anything is read, and a chunked body is counted while it arrives and refused the moment it
passes the limit. The headers are set on every response, errors included.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Awaitable, Callable, MutableMapping

Scope = MutableMapping[str, object]
Message = MutableMapping[str, object]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The page loads only its own scripts, styles and images and talks only to its own origin. jsPsych's
# instructions and preload plugins write a few cosmetic style="" attributes, which this policy blocks;
# human_study/src/style.css restores them, so no 'unsafe-inline' is needed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
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
        headers = dict(scope["headers"])  # type: ignore[arg-type]
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await _reply(send, 413, too_big)
            return
        chunks, size = [], 0
        while True:  # buffer the (small) body, so the endpoint never sees more than the limit
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)  # type: ignore[arg-type]
            if size > self.max_bytes:
                await _reply(send, 413, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False  # type: ignore[arg-type]

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for a disconnect, as the server would
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class SecurityHeaders:
    """Add ``SECURITY_HEADERS`` to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]  # type: ignore
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
            raise ValueError(f"rate limit: per_minute={per_minute} must be > 0 and burst={burst} at least 1")
        self.rate, self.burst, self.max_clients, self.clock = per_minute / 60.0, float(burst), max_clients, clock
        self.buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last update)
        self.lock = threading.Lock()

    def retry_after(self, key: str) -> float:
        """Take one request for ``key``: 0 if allowed, else the seconds until one is allowed."""
        now = self.clock()
        with self.lock:
            tokens, last = self.buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens >= 1:
                self.buckets[key] = (tokens - 1, now)
                if len(self.buckets) > self.max_clients:
                    self._forget_idle(now)
                return 0.0
            self.buckets[key] = (tokens, now)
            return (1 - tokens) / self.rate

    def _forget_idle(self, now: float) -> None:
        full_after = self.burst / self.rate
        for key in [k for k, (_, last) in self.buckets.items() if now - last >= full_after]:
            del self.buckets[key]
