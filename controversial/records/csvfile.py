"""The CSV core every record reader uses: the header checked first, then rows with their line numbers.

Errors name the file, the row (the physical line, header = 1) and the column, and say what is allowed,
so a user can fix the file without reading code.

Formula injection: a text cell that a spreadsheet would run as a formula (first character ``=``, ``+``,
``-``, ``@``, tab or carriage return, e.g. a pilot PROLIFIC_PID ``-1-1``) is written with a leading ``'``,
which spreadsheets read as "this is text" and do not show; a text cell that already starts with ``'``
followed by one of those characters or another ``'`` gets one more, so the escape is reversible. Finite
numbers are not escaped: ints, floats and text that reads as a plain finite number (``-0.5``, ``-1e-3``) are
written as they are, since a spreadsheet reads them as numbers and runs nothing; ``-inf`` and ``-nan`` are no
numbers to a spreadsheet (it runs them as formulas and shows an error), so they are escaped like formulas.
An identifier (``Text``: a participant id, which may be ``-1e5`` in a pilot) is text whatever it looks like:
it is escaped even when it reads as a number, which a spreadsheet would otherwise turn into -100000. Every
reader here (``open_rows``) removes the one added ``'``, so the project reads back exactly what it wrote.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from controversial.atomic import atomic_write_text
from controversial.errors import InputError

__all__ = [
    "InputError",
    "csv_text",
    "decoding_problem",
    "delimiter_note",
    "escape_cell",
    "field_count_problem",
    "integer",
    "number",
    "open_rows",
    "optional_number",
    "read_records",
    "Text",
    "text",
    "unescape_cell",
    "write_csv",
]

OTHER_DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "vertical bars"}
MISSING_VALUES = ("", "nan", "NaN", "NA", "na")
FORMULA_STARTS = frozenset("=+-@\t\r")  # what a spreadsheet may run as a formula (OWASP's list)
ESCAPED_STARTS = FORMULA_STARTS | {"'"}  # what follows an added quote
PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # finite: what a spreadsheet reads as one


class Text(str):
    """A cell that is text whatever it looks like (an identifier): escaped even when it reads as a number."""


def escape_cell(value: str) -> str:
    """``value`` as a CSV cell no spreadsheet runs as a formula (or, for ``Text``, reads as a number): a leading
    ``'`` when it would."""
    first = value[:1]
    number = PLAIN_NUMBER.fullmatch(value) is not None and not isinstance(value, Text)
    if (first in FORMULA_STARTS and not number) or (first == "'" and value[1:2] in ESCAPED_STARTS):
        return "'" + value
    return value


def unescape_cell(value: str) -> str:
    """The cell as it was before ``escape_cell``."""
    return value[1:] if value[:1] == "'" and value[1:2] in ESCAPED_STARTS else value


def delimiter_note(header: Sequence[str]) -> str:
    """When a header that should have several columns reads as one, say which delimiter the file uses."""
    if len(header) == 1:
        for delimiter, name in OTHER_DELIMITERS.items():
            if delimiter in header[0]:
                return f"; the header is separated by {name} ({delimiter!r}), but the file must be comma-separated"
    return ""


def decoding_problem(path: Path, row: int, error: UnicodeDecodeError) -> str:
    return (
        f"{path}, row {row}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); a binary file, or text in "
        "another encoding such as Latin-1? Re-save it as UTF-8"
    )


def field_count_problem(path: Path, row: int, record: Mapping[str | None, object]) -> str | None:
    """Rows with more or fewer fields than the header (a truncated or hand-edited file)."""
    if None in record:
        return f"{path}, row {row}: more fields than the header has columns"
    if None in record.values():
        return f"{path}, row {row}: fewer fields than the header has columns (a truncated file?)"
    return None


def open_rows(
    path: Path,
    required: Sequence[str],
    aliases: Mapping[str, str] | None = None,
    case_insensitive: bool = False,
    error: type[Exception] = InputError,
    kind: str = "",
    mistaken: Mapping[str, str] | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """Check the header, then yield (line, record) pairs; header names are stripped, ``aliases`` renamed
    (e.g. ``subject code`` -> ``subject``) and, with ``case_insensitive``, lower-cased first.

    An empty file, a missing column (with the delimiter found when the header reads as one column, or, when a
    ``mistaken`` column is there, the other kind of file it reveals: column -> what), text that is not
    UTF-8, or a row with more or fewer fields than the header raises ``error`` naming the file and row;
    the header is read eagerly, so a bad header fails at the call, not at the first iteration.
    """
    if not path.is_file():
        raise error(f"{path}: file not found")
    aliases = dict(aliases or {})
    handle = path.open(newline="", encoding="utf-8-sig")
    quoted = [False]  # whether a line read since the last record holds a ' (csv reads one line at a time)

    def lines() -> Iterator[str]:
        for line in handle:
            quoted[0] = quoted[0] or "'" in line
            yield line

    reader = csv.DictReader(lines())
    header = []
    try:
        fieldnames = reader.fieldnames or []
    except UnicodeDecodeError as decode_error:
        handle.close()
        raise error(decoding_problem(path, 1, decode_error)) from None
    for name in fieldnames:
        name = name.strip().lower() if case_insensitive else name.strip()
        header.append(aliases.get(name, name))
    missing = [c for c in required if c not in header]
    if not fieldnames:
        handle.close()
        raise error(f"{path}: empty file (not even a header row); expected a CSV with columns {', '.join(required)}")
    revealed = [what for column, what in (mistaken or {}).items() if column in header]
    if missing and revealed:
        handle.close()
        raise error(
            f"{path}: this is {revealed[0]} (it has column(s) {', '.join(c for c in mistaken or {} if c in header)} "
            f"and lacks {', '.join(missing)}): were two input files swapped?"
        )
    if missing:
        handle.close()
        what = f"{kind} " if kind else ""
        raise error(
            f"{path}, row 1 (header): missing {what}column(s) {', '.join(missing)}; "
            f"required: {', '.join(required)}" + delimiter_note(header)
        )
    reader.fieldnames = header

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        with handle:
            try:
                for record in reader:
                    problem = field_count_problem(path, reader.line_num, record)
                    if problem:
                        raise error(problem)
                    if quoted[0]:  # only rows with a ' anywhere can hold an escaped cell: the rest pass untouched
                        quoted[0] = False
                        record = {k: unescape_cell(v) for k, v in record.items()}
                    yield reader.line_num, record  # physical line: blank lines skipped by csv still count
            except UnicodeDecodeError as decode_error:
                raise error(decoding_problem(path, reader.line_num + 1, decode_error)) from None

    return rows()


def read_records(
    path: Path, required: Sequence[str], error: type[Exception] = InputError, kind: str = ""
) -> list[tuple[int, dict[str, str]]]:
    """Every (line, record) of a CSV file the project wrote, after the header check."""
    return list(open_rows(Path(path), required, error=error, kind=kind))


def text(path: Path, line: int, record: Mapping[str, str | None], column: str, allow_empty: bool = False) -> str:
    """A stripped string cell; empty or NaN is an error unless ``allow_empty``."""
    value = record.get(column)
    value = "" if value is None else value.strip()
    if not value and not allow_empty:
        raise InputError(f"{path}, row {line}, column '{column}': empty value; a non-empty string is required")
    if value.lower() == "nan" and not allow_empty:
        raise InputError(f"{path}, row {line}, column '{column}': NaN is not allowed")
    return value


def number(path: Path, line: int, record: Mapping[str, str | None], column: str) -> float:
    """A finite float cell."""
    raw = text(path, line, record, column)
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not a finite number")
    return value


def integer(path: Path, line: int, record: Mapping[str, str | None], column: str, meaning: str = "") -> int:
    """An integer cell (``3`` or ``3.0``)."""
    raw = text(path, line, record, column)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not an integer{meaning}")
    return int(value)


def optional_number(
    path: Path, line: int, record: Mapping[str, str | None], column: str, minimum: float, whole: bool = False
) -> float | None:
    """A carried column (rt, trial): empty or NaN is allowed (None), anything else a number >= ``minimum``."""
    raw = text(path, line, record, column, allow_empty=True)
    if raw in MISSING_VALUES:
        return None
    kind = "an integer" if whole else "a number"
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not {kind}") from None
    if not value >= minimum or not math.isfinite(value) or (whole and not value.is_integer()):
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r}; allowed: {kind} >= {minimum:g}, or empty")
    return value


def csv_chunks(header: Sequence[str], rows: Iterable[Sequence[object]], size: int = 1 << 16) -> Iterator[str]:
    """CSV text (header first) in pieces of about ``size`` characters, for streaming a large table;
    floats written exactly (``repr``), text a spreadsheet would run as a formula escaped (``escape_cell``),
    ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # csv quotes a cell with \n but not one with a lone \r, which a reader then takes for a line end
    quoting_all = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow([escape_cell(str(name)) for name in header])
    for row in rows:
        cells = [_cell(v) for v in row]
        (quoting_all if any(isinstance(c, str) and "\r" in c for c in cells) else writer).writerow(cells)
        if buffer.tell() >= size:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _cell(value: object) -> object:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else escape_cell(repr(value))
    if value is None or isinstance(value, int):
        return value
    return escape_cell(value if isinstance(value, Text) else str(value))


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV text with floats written exactly (``repr``), ``\\n`` line ends."""
    return "".join(csv_chunks(header, rows))


def write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Write a CSV atomically: a kill never leaves half a file."""
    atomic_write_text(path, csv_text(header, rows))
