"""User-facing errors: one hierarchy, each error one paragraph that says what was wrong and what to do."""
from __future__ import annotations

import re

from controversial.data import DatasetNotFoundError
from controversial.zoo.registry import UnknownNameError


class UserError(Exception):
    """A problem with the user's request or files, explained in plain words."""


class InputFileError(UserError, ValueError):
    """A file that cannot be read as what it should be; names the file and, where known, row and column."""

    def __init__(self, path: object, problem: str, row: int | None = None, column: str | None = None) -> None:
        where = str(path) + (f", row {row}" if row is not None else "") + (f", column '{column}'" if column else "")
        super().__init__(f"{where}: {problem}")
        self.path, self.row, self.column, self.problem = path, row, column, problem


USER_FACING = (UserError, UnknownNameError, DatasetNotFoundError)


def one_paragraph(text: str) -> str:
    """Hydra and pydantic write lists on indented lines; one paragraph reads them as a comma-separated run."""
    text = re.sub(r"\n[ \t]+", ", ", text.strip())
    text = re.sub(r":,\s*", ": ", text)
    return re.sub(r"\s*\n+\s*", " ", text)
