"""Stimulus manifests: one ``manifest.csv`` row per attempt at a cell (model pair x cell x seed).

A *cell* is an ordered class pair ``(class_a, class_b)``: one entry of a model pair's class-by-class
matrix. The column names are the contract between synthesis, sweeps, natural-stimulus ranking, the study
export and the analysis, so change them only together with their readers.

The instance columns (``synthesis/instances.py``) come last and are optional when reading, so manifests
written before them still read: the seeds synthesis used per model, and the hard score and target
probabilities under the models' held-out instances (empty when there were none).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from controversial.atomic import atomic_write_text
from controversial.errors import UserError
from controversial.records.csvfile import csv_text, read_records
from controversial.untrusted import safe_component

MANIFEST_NAME = "manifest.csv"


@dataclass(frozen=True)
class ManifestRow:
    """One attempted stimulus. ``accepted`` is decided on the 8-bit image that people will see."""

    dataset: str
    model_a: str
    model_b: str
    class_a: int
    class_b: int
    class_a_name: str
    class_b_name: str
    seed: int
    source: str  # "synthetic" (optimised) or "natural" (a test-set image ranked by controversiality)
    init: str  # "noise", "test_image:<index>", or "natural:<index>"
    steps: int
    converged: bool
    hard_score: float
    smooth_score: float
    p_model_a_class_a: float
    p_model_a_class_b: float
    p_model_b_class_a: float
    p_model_b_class_b: float
    accepted: bool
    status: str  # "accepted", "below_threshold", or "failed: <reason>"
    image_file: str  # relative to the manifest's folder; empty when no image was written
    wall_time_s: float
    instances_a: str = ""  # the trained instances (seeds) of model A synthesis used, "0" or "0,1"
    instances_b: str = ""
    heldout_hard_score: float | None = None  # the hard score under every held-out instance (None, "": none)
    heldout_accepted: bool | None = None  # the acceptance rule under every held-out instance (None, "": none)
    heldout_probabilities: str = ""  # "<model>@<seed>:<p(class_a)>/<p(class_b)>" per held-out instance, ";"-joined

    @property
    def cell(self) -> tuple[int, int]:
        """The cell this row attempted, ``(class_a, class_b)``, independent of the seed that filled it."""
        return (self.class_a, self.class_b)


MANIFEST_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ManifestRow))
INSTANCE_COLUMNS = ("instances_a", "instances_b", "heldout_hard_score", "heldout_accepted", "heldout_probabilities")
_REQUIRED_COLUMNS = tuple(c for c in MANIFEST_COLUMNS if c not in INSTANCE_COLUMNS)
_TIMING_COLUMNS = ("wall_time_s",)
_NAME_COLUMNS = ("dataset", "model_a", "model_b", "class_a_name", "class_b_name")  # they become parts of file names
_BOOL_COLUMNS = {"converged", "accepted", "heldout_accepted"}
_INT_COLUMNS = {"class_a", "class_b", "seed", "steps"}
_FLOAT_COLUMNS = {
    "hard_score",
    "smooth_score",
    "wall_time_s",
    "p_model_a_class_a",
    "p_model_a_class_b",
    "p_model_b_class_a",
    "p_model_b_class_b",
    "heldout_hard_score",
}
_OPTIONAL_COLUMNS = {"heldout_hard_score", "heldout_accepted"}  # empty: no held-out instance


def _format(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return str(value)


def manifest_text(rows: list[ManifestRow]) -> str:
    """The manifest as CSV text (booleans ``true``/``false``, floats exact)."""
    return csv_text(MANIFEST_COLUMNS, ([_format(value) for value in asdict(row).values()] for row in rows))


def write_manifest(path: str | Path, rows: list[ManifestRow]) -> None:
    """Write the whole manifest atomically (temp file + rename): a kill never leaves half a row."""
    atomic_write_text(path, manifest_text(rows))


def _parse(column: str, raw: str, path: Path, line: int) -> bool | int | float | str | None:
    try:
        if column in _OPTIONAL_COLUMNS and raw == "":
            return None
        if column in _BOOL_COLUMNS:
            if raw not in {"true", "false"}:
                raise UserError("expected 'true' or 'false'")
            return raw == "true"
        if column in _INT_COLUMNS:
            return int(raw)
        if column in _FLOAT_COLUMNS:
            return float(raw)
    except ValueError as error:
        raise UserError(f"{path}, row {line}, column '{column}': cannot read {raw!r} ({error})") from None
    return raw


def read_manifest(path: str | Path) -> list[ManifestRow]:
    """Read and validate a manifest; errors name the file, row and column."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no manifest at {path}")
    records = read_records(path, _REQUIRED_COLUMNS, UserError, kind="manifest")
    rows = []
    for line, record in records:
        present = [c for c in MANIFEST_COLUMNS if c in record]  # the instance columns may be absent
        values: dict[str, Any] = {c: _parse(c, record[c], path, line) for c in present}  # typed by column
        for column in _NAME_COLUMNS:
            safe_component(values[column], f"{path}, row {line}, column '{column}'")
        rows.append(ManifestRow(**values))
    return rows


def without_timing(rows: list[ManifestRow]) -> list[dict]:
    """Rows as dicts minus wall-clock columns, for reproducibility comparisons."""
    return [{k: v for k, v in asdict(r).items() if k not in _TIMING_COLUMNS} for r in rows]
