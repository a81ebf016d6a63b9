"""uvicorn's HTTP protocol with the security headers on the replies it writes itself.

A request that the HTTP parser refuses (a path longer than the parser's limit, a garbage request line, a bad
header name, ``Content-Length`` together with ``Transfer-Encoding``) never reaches the app: uvicorn answers it
with its own 400, which carried none of the headers the app's middleware adds (``guards.SecurityHeaders``).
These protocol classes write that 400 with the same headers, so every byte the server sends carries them, and
uvicorn's log line for each such request is throttled (``ThrottledRefusals``).
``uvicorn_config`` is the one place the study server's uvicorn settings are made (``serve_study.py``, the
scripted pilot, the tests).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from controversial.study.guards import SECURITY_HEADERS
from controversial.study.log_throttle import LogThrottle

REFUSED = "Invalid HTTP request received."  # what uvicorn logs, and answers, for a request its parser refuses


def refusal_bytes(message: str) -> bytes:
    """The whole 400 response for a request the parser refused: security headers, no caching, connection closed."""
    body = message.encode("ascii", "replace")
    headers = [
        *SECURITY_HEADERS,
        (b"cache-control", b"no-store"),
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    return b"HTTP/1.1 400 Bad Request\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n" + body


class _GuardedRefusal:
    """Replaces uvicorn's ``send_400_response`` (the same in both protocols: write the reply, close)."""

    transport: asyncio.Transport

    def send_400_response(self, msg: str) -> None:
        self.transport.write(refusal_bytes(msg))
        self.transport.close()


class GuardedH11Protocol(_GuardedRefusal, H11Protocol):
    """uvicorn's pure-Python HTTP/1.1 protocol, its 400s with the security headers."""


def _httptools_protocol() -> type | None:
    if importlib.util.find_spec("httptools") is None:
        return None
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    return type("GuardedHttpToolsProtocol", (_GuardedRefusal, HttpToolsProtocol), {"__doc__": "httptools, guarded"})


GuardedHttpToolsProtocol = _httptools_protocol()
# What uvicorn's "auto" picks: httptools when it is installed, else h11.
PROTOCOL: type = GuardedHttpToolsProtocol or GuardedH11Protocol


class ThrottledRefusals(logging.Filter):
    """uvicorn logs every request its parser refuses (a WARNING with a traceback): one line a minute here, with
    the count since the last one, so that a client sending garbage cannot fill the log."""

    def __init__(self) -> None:
        super().__init__()
        self.throttle = LogThrottle(max_lines=1)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != REFUSED:
            return True
        count = self.throttle.due(REFUSED)
        if count > 1:
            record.msg, record.exc_info, record.exc_text = f"{REFUSED} ({count} since the last such line)", None, None
        return count > 0


def uvicorn_config(app: Any, host: str, port: int, protocol: type = PROTOCOL, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for the study server: a guarded protocol, its refusals logged with a bound, and no
    logging setup of its own (the command's logging stays in force)."""
    error_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ThrottledRefusals) for f in error_log.filters):
        error_log.addFilter(ThrottledRefusals())
    return uvicorn.Config(app, host=host, port=port, http=protocol, log_config=None, **options)
