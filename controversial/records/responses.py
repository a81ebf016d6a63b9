"""Human ratings and model responses in the PNAS 2020 long format (one row per image x category).

Read as the release publishes them (``subject code`` with a space, file names without extension,
replications ``Exp2a``/``Exp2b`` in the subject code) and as this project writes them. Readers
validate row by row; errors name the file, the row and the column and say what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from controversial.records.csvfile import InputError, number, open_rows, optional_number, text, write_csv
from controversial.records.names import Scheme, StimulusNameError, parse_name

RATING_SCALE: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)

TARGET_COLUMNS: tuple[str, ...] = ("targeted_model_1", "targeted_model_2", "targeted_class_1", "targeted_class_2")
HUMAN_COLUMNS: tuple[str, ...] = (
    "subject",
    "image",
    "image_repetition",
    "response_category",
    *TARGET_COLUMNS,
    "category_rating",
    "first_reaction_rt",
    "rt",
    "trial",
)
# The analysis needs these; rt, first_reaction_rt and trial are carried but optional.
HUMAN_REQUIRED: tuple[str, ...] = HUMAN_COLUMNS[:9]
SUBJECT_ALIASES: dict[str, str] = {"subject code": "subject"}  # the release's spelling
REPETITION_VALUES: dict[str, int] = {"0": 0, "1": 1, "0.0": 0, "1.0": 1}
MODEL_COLUMNS: tuple[str, ...] = ("model", "image", "response_category", *TARGET_COLUMNS, "category_rating")
# The release's subject codes: Exp1_S01, Exp2a_S01, Exp2b_S01 (the part before "_" names the replication);
# the study server's later batches of an adaptive study: B2_P0001 (batch 1 is P0001).
_REPLICATION = re.compile(r"^(Exp\d+[a-z]?|B\d+)_")
_NATURAL_PREFIXES = ("MNIST_", "CIFAR10_", "CIFAR_10_test_")


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
class RatingTable:
    path: Path
    rows: tuple[Rating, ...]


@dataclass(frozen=True)
class ModelTable:
    path: Path
    rows: tuple[ModelResponse, ...]


def replication(subject: str) -> str:
    """The release's replication of a participant (``Exp2a_S07`` -> ``Exp2a``), or an adaptive study's batch
    (``B2_P0001`` -> ``B2``); "" for other codes."""
    match = _REPLICATION.match(subject)
    return match.group(1) if match else ""


def natural_true_class(image: str, categories: Sequence[str]) -> str | None:
    """True class of a natural test image from its name (either naming scheme, extension optional; another
    dataset's ``<display name>_<index>_<category>`` with one of ``categories``), or None for a name that is not a
    natural image's. A natural-looking name without a usable class is an error,
    because the image would silently drop out of accuracy."""
    name = Path(image).name
    filename = name if name.lower().endswith(".png") else name + ".png"
    schemes: tuple[Scheme, ...] = ("project", "pnas2020")
    for scheme in schemes:
        try:
            record = parse_name(filename, scheme)
        except StimulusNameError:
            continue
        if record.kind != "natural":
            return None
        if record.true_class not in categories:
            raise InputError(
                f"natural image {image!r}: class {record.true_class!r} is not a category ({', '.join(categories)})"
            )
        return record.true_class
    # a dataset not registered in this process (an imported model's folder): <display name>_<index>_<category>
    words = "|".join(re.escape(c) for c in sorted(categories, key=len, reverse=True))
    other = re.match(rf"^.+_\d+_({words})$", name[:-4] if name.lower().endswith(".png") else name) if words else None
    if other:
        return other.group(1)
    if name.startswith(_NATURAL_PREFIXES):
        raise InputError(
            f"natural image {image!r}: no class can be read from the name; accepted: "
            "MNIST_<index>_<class>, CIFAR10_<index>_<class>, CIFAR_10_test_<index>_<test index>_<class>"
        )
    return None


def _targets(path: Path, line: int, record: dict) -> tuple[str, str, str, str]:
    values = tuple(text(path, line, record, c, allow_empty=True) for c in TARGET_COLUMNS)
    values = tuple("" if v.lower() == "nan" else v for v in values)
    if any(values) and not all(values):
        empty = [c for c, v in zip(TARGET_COLUMNS, values) if not v]
        raise InputError(
            f"{path}, row {line}, column '{empty[0]}': empty, but other targeted_* columns are set; "
            "fill all four (controversial stimulus) or none (natural image)"
        )
    return values  # type: ignore[return-value]


def _check_duplicate(seen: dict, key: tuple, path: Path, line: int, what: str) -> None:
    if key in seen:
        raise InputError(
            f"{path}, row {line}, column 'response_category': duplicate {what} {key!r} (first on row {seen[key]})"
        )
    seen[key] = line


def _repetition(path: Path, line: int, record: dict) -> int:
    raw = text(path, line, record, "image_repetition")
    if raw not in REPETITION_VALUES:
        raise InputError(
            f"{path}, row {line}, column 'image_repetition': {raw!r}; allowed: 0 (first presentation), 1 (repeat)"
        )
    return REPETITION_VALUES[raw]


def read_human_ratings(path: str | Path, scale: Sequence[float] = RATING_SCALE) -> RatingTable:
    """Read PNAS-format human ratings (the release's ``subject code`` accepted), validating every row."""
    path = Path(path)
    allowed = ", ".join(f"{v:g}" for v in scale)
    rows: list[Rating] = []
    seen: dict[tuple, int] = {}
    mistaken = {"model": "a model responses file (model_responses=), not human ratings"}
    for line, record in open_rows(path, HUMAN_REQUIRED, SUBJECT_ALIASES, mistaken=mistaken):
        rating = number(path, line, record, "category_rating")
        if not any(abs(rating - v) < 1e-9 for v in scale):
            raise InputError(
                f"{path}, row {line}, column 'category_rating': {rating!r} is not on the rating scale ({allowed})"
            )
        row = Rating(
            subject=text(path, line, record, "subject"),
            image=text(path, line, record, "image"),
            repetition=_repetition(path, line, record),
            category=text(path, line, record, "response_category"),
            targets=_targets(path, line, record),
            rating=rating,
            line=line,
        )
        for column in ("rt", "first_reaction_rt", "trial"):  # carried, optional; when present, non-negative
            optional_number(path, line, record, column, minimum=0.0, whole=column == "trial")
        _check_duplicate(
            seen,
            (row.subject, row.image, row.repetition, row.category),
            path,
            line,
            "(subject, image, image_repetition, response_category)",
        )
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no data rows")
    return RatingTable(path, tuple(rows))


def read_model_responses(path: str | Path) -> ModelTable:
    """Read PNAS-format model responses (probabilities in [0, 1]), validating every row."""
    path = Path(path)
    rows: list[ModelResponse] = []
    seen: dict[tuple, int] = {}
    mistaken = {"subject": "a human ratings file (human_ratings=), not model responses"}
    for line, record in open_rows(path, MODEL_COLUMNS, SUBJECT_ALIASES, mistaken=mistaken):
        probability = number(path, line, record, "category_rating")
        if not 0.0 <= probability <= 1.0:
            raise InputError(
                f"{path}, row {line}, column 'category_rating': {probability!r} is not a probability in [0, 1]"
            )
        row = ModelResponse(
            model=text(path, line, record, "model"),
            image=text(path, line, record, "image"),
            category=text(path, line, record, "response_category"),
            targets=_targets(path, line, record),
            probability=probability,
            line=line,
        )
        _check_duplicate(seen, (row.model, row.image, row.category), path, line, "(model, image, response_category)")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no data rows")
    return ModelTable(path, tuple(rows))


def split_replications(tables: Sequence[RatingTable]) -> dict[str, RatingTable]:
    """Human ratings by replication (``Exp2a``/``Exp2b`` in the release's subject codes; "" for other codes).
    A participant in two files is an error: replications have different participants."""
    owner: dict[str, Path] = {}
    rows: dict[str, list[Rating]] = {}
    paths: dict[str, list[Path]] = {}
    for table in tables:
        for subject in dict.fromkeys(r.subject for r in table.rows):
            if subject in owner:
                raise InputError(f"{table.path}, column 'subject': participant {subject!r} is also in {owner[subject]}")
            owner[subject] = table.path
        for r in table.rows:
            rows.setdefault(replication(r.subject), []).append(r)
            if table.path not in paths.setdefault(replication(r.subject), []):
                paths[replication(r.subject)].append(table.path)
    return {name: RatingTable(Path(" + ".join(map(str, paths[name]))), tuple(rows[name])) for name in sorted(rows)}


def merge_model_tables(tables: Sequence[ModelTable]) -> ModelTable:
    """Several model-response files as one table (e.g. the release's models next to ours); a model
    named in two files is an error, since its rows would be ambiguous."""
    owner: dict[str, Path] = {}
    for table in tables:
        for name in dict.fromkeys(r.model for r in table.rows):
            if name in owner:
                raise InputError(
                    f"{table.path}, column 'model': model {name!r} is also in {owner[name]}; "
                    "rename it in one of the files"
                )
            owner[name] = table.path
    if len(tables) == 1:
        return tables[0]
    return ModelTable(Path(" + ".join(str(t.path) for t in tables)), tuple(r for t in tables for r in t.rows))


def write_human_ratings(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the canonical ``HUMAN_COLUMNS`` order, atomically."""
    write_csv(path, HUMAN_COLUMNS, rows)


def write_model_responses(path: str | Path, rows: Iterable[Sequence[object]]) -> None:
    """Write rows in the canonical ``MODEL_COLUMNS`` order, atomically."""
    write_csv(path, MODEL_COLUMNS, rows)
