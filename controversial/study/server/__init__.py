"""The collection server: a FastAPI app serving one study bundle version and storing every answer.

Guarantees: each participant's order is generated once and stored, so a reload resumes where they
were; a response is committed before the reply, so an acknowledged answer is never lost; the
database's unique keys make re-submission idempotent and an answer is never overwritten (a
different answer for an answered trial is refused and counted); invalid input gets a 4xx with a
message that names the field and what is allowed, and stores nothing; participants never see a
stack trace or anything from the private key; no session token reaches a log.

A session belongs to the browser that started it: ``POST /api/session`` hands the browser a secret
(its token) once, and gives it again only to a browser that presents it, or to another browser arriving
with the same Prolific submission (PROLIFIC_PID and SESSION_ID), which revokes the first browser's token.
A PROLIFIC_PID alone never opens someone's session nor locks its owner out (``sessions.py``).

Modules: ``options`` (the command's options), ``app`` (``create_app``: state and middleware),
``state`` (what routes share, and the guards they name), ``participant``, ``calibration``, ``preview``,
``monitor``, ``admin`` and ``static`` (the routers), ``sessions`` (the resume policy). API and threat model:
``docs/human_study.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controversial.study.server.options import (
    DEFAULT_VENDOR_DIR,
    PROLIFIC_COMPLETION_URL,
    ExportCsvSettings,
    RateLimitSettings,
    ServeStudySettings,
)

__all__ = [
    "DEFAULT_VENDOR_DIR",
    "PROLIFIC_COMPLETION_URL",
    "ExportCsvSettings",
    "RateLimitSettings",
    "ServeStudySettings",
    "create_app",
]

if TYPE_CHECKING:
    from controversial.study.server.app import create_app


def __getattr__(name: str) -> Any:
    """``create_app`` on first use: every command's schema imports the options, and only the server needs
    FastAPI and the database."""
    if name == "create_app":
        from controversial.study.server.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
