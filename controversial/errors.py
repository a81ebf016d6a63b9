"""User-facing errors: one hierarchy, each error one paragraph that says what was wrong and what to do.

Every error a user can fix derives from :class:`UserError`; the commands show it without a traceback
and exit with status 2 (see :mod:`controversial.cli`).
"""

from __future__ import annotations

import re


class UserError(ValueError):
    """A problem with the user's request or files, explained in plain words (a ValueError, so code that
    validates values, pydantic's validators included, treats it as one)."""


class InputError(UserError):
    """A file that cannot be read as what it should be; the message names the file, row and column."""


def one_paragraph(text: str) -> str:
    """Hydra and pydantic write lists on indented lines; one paragraph reads them as a comma-separated run."""
    text = re.sub(r"\n[ \t]+", ", ", text.strip())
    text = re.sub(r":,\s*", ": ", text)
    return re.sub(r"\s*\n+\s*", " ", text)
