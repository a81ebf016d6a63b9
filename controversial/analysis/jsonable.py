"""Result records as JSON: the matrix type, the optional-block field and ``to_json``, shared by the human-rating
results and the benchmark's (which neither imports the other for them).

``to_json`` is the one place that turns result dataclasses into the JSON-ready structure of ``results.json``:
fields in declaration order, NaN as null, optional blocks left out when absent.
"""

from __future__ import annotations

import math
from dataclasses import field, fields, is_dataclass
from typing import Any

import numpy as np

Matrix = list[list[float]]  # NaN where undefined; written as null


def optional() -> Any:
    """A field that is left out of the JSON when it is None (a block that was not computed)."""
    return field(default=None, metadata={"omit_if_none": True})


def to_json(value: Any) -> Any:
    """JSON-ready values: dataclasses as objects in field order, NaN and infinities as None, numpy as Python."""
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_json(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get("omit_if_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    return value
