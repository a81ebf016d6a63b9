"""``fidelity.csv``: one row per PNAS controversial stimulus scored under this project's two corresponding models."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Sequence

from controversial.records.csvfile import write_csv


@dataclass(frozen=True)
class FidelityRow:
    image: str  # the release's name without extension
    handle_1: str  # the paper's model driven to see class_1
    class_1: str
    handle_2: str
    class_2: str
    model_1: str  # this project's model for handle_1
    model_2: str
    p_model_1_class_1: float
    p_model_1_class_2: float
    p_model_2_class_2: float
    p_model_2_class_1: float
    hard_score: float  # min(p_1(c_1), 1 - p_1(c_2), p_2(c_2), 1 - p_2(c_1))


FIDELITY_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(FidelityRow))


def write_fidelity(path: str | Path, rows: Sequence[FidelityRow]) -> None:
    """Write the per-stimulus table atomically."""
    write_csv(path, FIDELITY_COLUMNS, (astuple(r) for r in rows))
