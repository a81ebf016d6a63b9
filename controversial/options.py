"""The base of every option group: typed, range-checked, immutable, and strict about unknown keys.

An option group is declared once, beside the code that owns it, as a subclass of :class:`Options`;
its field defaults are the defaults (the commands' YAML only composes and overrides), and the
library functions take the group itself, so no value is copied field by field between layers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from controversial.errors import UserError

Probability = Annotated[float, Field(gt=0, le=1)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=0, description="random seed")]
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?|mps)$"


class Options(BaseModel):
    """Unknown keys are errors (a typo never silently keeps a default); values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def one_of(value: str, allowed: Iterable[str]) -> str:
    """``value`` if it is among ``allowed``; else a ValueError that lists what is."""
    allowed = list(allowed)
    if value not in allowed:
        raise UserError(f"{value!r} is not one of: {', '.join(allowed)}")
    return value


def ordered_range(bounds: tuple[float, float]) -> tuple[float, float]:
    """``[low, high]`` with ``0 <= low <= high``."""
    if not 0 <= bounds[0] <= bounds[1]:
        raise UserError(f"[{bounds[0]}, {bounds[1]}] is not a range [low, high] with 0 <= low <= high")
    return bounds


def defaults(schema: type[Options]) -> dict[str, Any]:
    """The schema's defaults as a plain config tree: Hydra's base node of a command.

    A required value becomes ``???`` (Hydra's "missing"), so the command asks for it; a required option
    group (a model chosen by name, e.g. ``model_a``) is left out: a config group composes it.
    """
    tree: dict[str, Any] = {}
    for name, field in schema.model_fields.items():
        key = field.alias or name
        if not field.is_required():
            tree[key] = to_jsonable_python(field.get_default(call_default_factory=True), by_alias=True)
        elif not _is_group(field.annotation):
            tree[key] = "???"
    return tree


def _is_group(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
