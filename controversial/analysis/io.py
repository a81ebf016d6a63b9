"""Readers and writers for the response tables the analysis consumes.

Three formats (see ``docs/analysis.md``): human ratings in the PNAS long format, model responses
in the PNAS model format, and trial-level choices in the model-vs-human raw-data format. Readers
validate row by row, so that every error names the file, the row (1-based line number, header is
line 1) and the column, and says what is allowed.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from controversial.atomic import atomic_write_text

RATING_SCALE: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)

HUMAN_COLUMNS: tuple[str, ...] = (
    "subject", "image", "image_repetition", "response_category",
    "targeted_model_1", "targeted_model_2", "targeted_class_1", "targeted_class_2",
    "category_rating", "first_reaction_rt", "rt", "trial",
)
# The analysis needs these; rt, first_reaction_rt and trial are carried but optional.
HUMAN_REQUIRED: tuple[str, ...] = HUMAN_COLUMNS[:9]
SUBJECT_ALIASES: tuple[str, ...] = ("subject code",)

MODEL_COLUMNS: tuple[str, ...] = (
    "model", "image", "response_category",
    "targeted_model_1", "targeted_model_2", "targeted_class_1", "targeted_class_2",
    "category_rating",
)
TARGET_COLUMNS: tuple[str, ...] = ("targeted_model_1", "targeted_model_2", "targeted_class_1", "targeted_class_2")

ATTENTION_COLUMNS: tuple[str, ...] = ("subject", "passed")  # the study server's attention.csv (other columns ignored)

TRIAL_COLUMNS: tuple[str, ...] = ("subj", "session", "trial", "rt", "object_response", "category", "condition", "imagename")
MISSED_RESPONSE = "na"

_NATURAL_NAME = re.compile(r"^(?:MNIST|CIFAR10)_(\d+)_(.+)\.png$")


class InputError(ValueError):
    """A response table that cannot be analysed as given; the message says where and why."""


@dataclass(frozen=True)
class Rating:
    """One human rating: a participant's probability judgement for one category of one image."""

    subject: str
    image: str
    repetition: int
    category: str
    targets: tuple[str, str, str, str]  # targeted_model_1, targeted_model_2, targeted_class_1, targeted_class_2
    rating: float
    line: int


@dataclass(frozen=True)
class ModelResponse:
    """One model's calibrated probability for one category of one image."""

    model: str
    image: str
    category: str
    targets: tuple[str, str, str, str]
    probability: float
    line: int


@dataclass(frozen=True)
class Trial:
    """One categorical choice in the model-vs-human format; ``response`` is None for a missed trial."""

    subject: str
    session: str
    trial: int
    response: str | None
    category: str
    condition: str
    image: str
    path: Path
    line: int


@dataclass(frozen=True)
class RatingTable:
    path: Path
    rows: tuple[Rating, ...]


@dataclass(frozen=True)
class ModelTable:
    path: Path
    rows: tuple[ModelResponse, ...]


def natural_true_class(image: str, categories: Sequence[str]) -> str | None:
    """True class of a natural test image from its name, or None for a synthetic stimulus.

    Rule: ``MNIST_<idx>_<class>.png`` or ``CIFAR10_<idx>_<class>.png`` (directory part ignored).
    ``<class>`` is taken as a category name if it is one; otherwise, if it is an integer, as an
    index into ``categories`` (CIFAR-10 releases sometimes use label indices). Anything else is an
    error, because a natural image without a usable label would silently drop out of accuracy.
    """
    match = _NATURAL_NAME.match(Path(image).name)
    if match is None:
        return None
    label = match.group(2)
    if label in categories:
        return label
    if label.isdigit() and int(label) < len(categories):
        return categories[int(label)]
    raise InputError(f"natural image {image!r}: class {label!r} is neither a category ({', '.join(categories)}) nor an index")


def _open_rows(path: Path, required: Sequence[str], aliases: dict[str, str]) -> Iterable[tuple[int, dict]]:
    """Check the header (aliases renamed), then yield (line number, record) pairs."""
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    handle = path.open(newline="", encoding="utf-8-sig")
    reader = csv.DictReader(handle)
    header = [aliases.get(name.strip(), name.strip()) for name in (reader.fieldnames or [])]
    missing = [c for c in required if c not in header]
    if missing:
        handle.close()
        raise InputError(f"{path}, row 1 (header): missing column(s) {', '.join(missing)}; required: {', '.join(required)}")
    reader.fieldnames = header

    def rows() -> Iterable[tuple[int, dict]]:
        with handle:
            for record in reader:
                line = reader.line_num  # physical line: blank lines skipped by csv still count
                if None in record:
                    raise InputError(f"{path}, row {line}: more fields than the header has columns")
                yield line, record

    return rows()


def _text(path: Path, line: int, record: dict, column: str, allow_empty: bool = False) -> str:
    value = record.get(column)
    value = "" if value is None else value.strip()
    if not value and not allow_empty:
        raise InputError(f"{path}, row {line}, column '{column}': empty value; a non-empty string is required")
    if value.lower() == "nan" and not allow_empty:
        raise InputError(f"{path}, row {line}, column '{column}': NaN is not allowed")
    return value


def _number(path: Path, line: int, record: dict, column: str) -> float:
    raw = _text(path, line, record, column)
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{path}, row {line}, column '{column}': {raw!r} is not a finite number")
    return value


def _targets(path: Path, line: int, record: dict) -> tuple[str, str, str, str]:
    values = tuple(_text(path, line, record, c, allow_empty=True) for c in TARGET_COLUMNS)
    values = tuple("" if v.lower() == "nan" else v for v in values)
    if any(values) and not all(values):
        empty = [c for c, v in zip(TARGET_COLUMNS, values) if not v]
        raise InputError(f"{path}, row {line}, column '{empty[0]}': empty, but other targeted_* columns are set; "
                         "fill all four (controversial stimulus) or none (natural image)")
    return values  # type: ignore[return-value]


def _check_duplicate(seen: dict, key: tuple, path: Path, line: int, what: str) -> None:
    if key in seen:
        raise InputError(f"{path}, row {line}, column 'response_category': duplicate {what} {key!r} (first on row {seen[key]})")
    seen[key] = line


def read_human_ratings(path: str | Path, scale: Sequence[float] = RATING_SCALE) -> RatingTable:
    """Read PNAS-format human ratings (``subject code`` accepted for ``subject``), validating every row."""
    path = Path(path)
    records = _open_rows(path, HUMAN_REQUIRED, {alias: "subject" for alias in SUBJECT_ALIASES})
    allowed = ", ".join(f"{v:g}" for v in scale)
    rows, seen = [], {}
    for line, record in records:
        rating = _number(path, line, record, "category_rating")
        if not any(abs(rating - v) < 1e-9 for v in scale):
            raise InputError(f"{path}, row {line}, column 'category_rating': {rating!r} is not on the rating scale ({allowed})")
        repetition_raw = _text(path, line, record, "image_repetition")
        try:
            repetition = int(float(repetition_raw))
        except ValueError:
            raise InputError(f"{path}, row {line}, column 'image_repetition': {repetition_raw!r} is not an integer (0 first, 1 repeat)") from None
        row = Rating(
            subject=_text(path, line, record, "subject"), image=_text(path, line, record, "image"),
            repetition=repetition, category=_text(path, line, record, "response_category"),
            targets=_targets(path, line, record), rating=rating, line=line,
        )
        _check_duplicate(seen, (row.subject, row.image, row.repetition, row.category), path, line,
                         "(subject, image, image_repetition, response_category)")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no data rows")
    return RatingTable(path, tuple(rows))


def read_model_responses(path: str | Path) -> ModelTable:
    """Read PNAS-format model responses (probabilities in [0, 1]), validating every row."""
    path = Path(path)
    records = _open_rows(path, MODEL_COLUMNS, {})
    rows, seen = [], {}
    for line, record in records:
        probability = _number(path, line, record, "category_rating")
        if not 0.0 <= probability <= 1.0:
            raise InputError(f"{path}, row {line}, column 'category_rating': {probability!r} is not a probability in [0, 1]")
        row = ModelResponse(
            model=_text(path, line, record, "model"), image=_text(path, line, record, "image"),
            category=_text(path, line, record, "response_category"), targets=_targets(path, line, record),
            probability=probability, line=line,
        )
        _check_duplicate(seen, (row.model, row.image, row.category), path, line, "(model, image, response_category)")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no data rows")
    return ModelTable(path, tuple(rows))


def read_attention(path: str | Path) -> dict[str, tuple[int, int]]:
    """Attention-check outcomes per participant, ``subject -> (passed, total)``, from the study
    server's ``attention.csv`` (one row per check; ``passed`` is true/false)."""
    path = Path(path)
    records = _open_rows(path, ATTENTION_COLUMNS, {alias: "subject" for alias in SUBJECT_ALIASES})
    outcome: dict[str, tuple[int, int]] = {}
    for line, record in records:
        subject = _text(path, line, record, "subject")
        passed = _text(path, line, record, "passed").lower()
        if passed not in ("true", "false"):
            raise InputError(f"{path}, row {line}, column 'passed': {passed!r}; allowed: true, false")
        ok, total = outcome.get(subject, (0, 0))
        outcome[subject] = (ok + (passed == "true"), total + 1)
    return outcome


def read_trials(paths: Sequence[str | Path]) -> list[Trial]:
    """Read model-vs-human raw-data CSVs (one per subject and session); ``na`` marks a missed response."""
    trials: list[Trial] = []
    seen: dict[tuple[str, str], tuple[Path, int]] = {}
    for path in map(Path, paths):
        records = _open_rows(path, TRIAL_COLUMNS, {})
        count = 0
        for line, record in records:
            trial_raw = _text(path, line, record, "trial")
            try:
                trial_number = int(float(trial_raw))
            except ValueError:
                raise InputError(f"{path}, row {line}, column 'trial': {trial_raw!r} is not an integer") from None
            response = _text(path, line, record, "object_response")
            trial = Trial(
                subject=_text(path, line, record, "subj"), session=_text(path, line, record, "session"),
                trial=trial_number, response=None if response == MISSED_RESPONSE else response,
                category=_text(path, line, record, "category"), condition=_text(path, line, record, "condition"),
                image=_text(path, line, record, "imagename"), path=path, line=line,
            )
            key = (trial.subject, trial.image)
            if key in seen:
                first_path, first_line = seen[key]
                raise InputError(f"{path}, row {line}, column 'imagename': subject {trial.subject!r} already answered "
                                 f"{trial.image!r} ({first_path}, row {first_line})")
            seen[key] = (path, line)
            trials.append(trial)
            count += 1
        if count == 0:
            raise InputError(f"{path}: no data rows")
    if not trials:
        raise InputError("no trial files given")
    return trials


def _csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])
    return buffer.getvalue()


def write_human_ratings(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the canonical ``HUMAN_COLUMNS`` order, atomically."""
    atomic_write_text(path, _csv_text(HUMAN_COLUMNS, rows))


def write_model_responses(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the canonical ``MODEL_COLUMNS`` order, atomically."""
    atomic_write_text(path, _csv_text(MODEL_COLUMNS, rows))


def write_trials(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the model-vs-human ``TRIAL_COLUMNS`` order, atomically."""
    atomic_write_text(path, _csv_text(TRIAL_COLUMNS, rows))
