"""Reading the CSV files the project writes (manifests, study bundles) with the header checked first."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence


def read_records(path: Path, required: Sequence[str], error: type[Exception] = ValueError, kind: str = "") -> list[dict[str, str]]:
    """Every row of a CSV file as a dict, after checking that each required column is in the header.

    A missing column raises ``error`` naming the file and the columns (``kind``, e.g. "manifest",
    says which sort of column in the message).
    """
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise error(f"{path}: missing {kind + ' ' if kind else ''}column(s) {', '.join(missing)}")
        return list(reader)
