"""The admin token: at least 32 random characters, from the environment or a file, never from the config.

A token on the command line is visible in ``ps`` and is written by Hydra into the run's
``.hydra/*.yaml``; so ``serve_study.py`` takes it only from ``STUDY_ADMIN_TOKEN`` or from a file
(``admin_token_file``, which may be group/world-unreadable), and ``mode=token`` writes a new one.
"""

from __future__ import annotations

import os
import secrets
import string
from pathlib import Path

from controversial.errors import UserError

MIN_LENGTH = 32
MIN_DISTINCT = 12  # a crude guard against "aaaa..." or "1234..." tokens that pass the length check
ENV_VAR = "STUDY_ADMIN_TOKEN"
_ALLOWED = set(string.ascii_letters + string.digits + "-_.~+/=")


class AdminTokenError(UserError):
    """An admin token that is missing, too weak or unreadable; the message says how to make a good one."""


HOW = "make one with `python serve_study.py mode=token admin_token_file=<path>`"


def check_admin_token(token: str) -> str:
    """Return ``token`` if it is long and varied enough to be a random secret, else raise."""
    if len(token) < MIN_LENGTH:
        raise AdminTokenError(f"admin token: {len(token)} characters, at least {MIN_LENGTH} random ones needed; {HOW}")
    if not set(token) <= _ALLOWED:
        raise AdminTokenError(f"admin token: use letters, digits and -_.~+/= only (it goes in an HTTP header); {HOW}")
    if len(set(token)) < MIN_DISTINCT:
        raise AdminTokenError(
            f"admin token: only {len(set(token))} distinct characters, it does not look random; {HOW}"
        )
    return token


def generate_admin_token() -> str:
    """A fresh token: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def write_admin_token(path: str | Path) -> Path:
    """Create ``path`` (mode 0600) holding a new token; refuse to replace an existing file."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise AdminTokenError(f"admin_token_file={path} exists; delete it first to replace the token") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(generate_admin_token() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return path


def read_admin_token(token_file: str | Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The token from ``token_file`` or else ``$STUDY_ADMIN_TOKEN``, checked; None if neither is set."""
    environ = dict(os.environ) if environ is None else environ
    if token_file:
        path = Path(token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as error:
            raise AdminTokenError(f"admin_token_file={path}: cannot read it ({error.strerror}); {HOW}") from None
        return check_admin_token(token)
    token = environ.get(ENV_VAR, "").strip()
    return check_admin_token(token) if token else None
