"""Paths as a summary line shows them: relative to the working directory when inside it (a run's
``outputs/...`` folder reads as the README shows it, and a log does not spell out the user's home), else absolute."""

from __future__ import annotations

from pathlib import Path


def shown(path: Path | str) -> str:
    """``path`` relative to the current directory when it lies inside it, else as an absolute path."""
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)
