"""The option group of ``evaluate.py decisions.*`` and the decision readouts, apart from
``model_decisions.py`` so that reading settings stays light (no torch), as the study server's start-up needs.

A readout turns a model's (N, K) class scores (its logits before calibration, ordered as its probabilities:
``model_decisions.decision_scores``) into N class names. ``own``: the arg-max over the model's own classes.
``imagenet16``: the benchmark's decision for an ImageNet model, the arg-max over the 16 entry-level categories,
for a model imported on ``imagenet16:<path>`` (its ``ImageNet16Readout`` gives each category the log of the
mean probability of its fine classes, so the arg-max of its scores is the benchmark's); it refuses a model on
other classes instead of reading it out silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, field_validator

from controversial.datasets import IMAGENET16_CLASSES
from controversial.errors import UserError
from controversial.options import Options

if TYPE_CHECKING:
    from controversial.zoo.readout import CalibratedModel

BENCHMARK_NAMES = r"^\d+_[^_]+_[^_]+_(?P<condition>[^_]+)_(?P<category>[^_]+)_"

Readout = Callable[["CalibratedModel", np.ndarray], list[str]]


def own_classes(model: CalibratedModel, p: np.ndarray) -> list[str]:
    """The arg-max over the model's own classes, for (N, K) scores."""
    return [model.class_names[k] for k in np.argmax(p, axis=1)]


def imagenet16_decisions(model: CalibratedModel, p: np.ndarray) -> list[str]:
    """The arg-max over the 16 entry-level categories, for a model whose classes are exactly those."""
    if tuple(model.class_names) != IMAGENET16_CLASSES:
        raise UserError(
            "readout 'imagenet16' needs a model on the 16 model-vs-human categories "
            f"({', '.join(IMAGENET16_CLASSES)}); "
            f"model {model.name!r} has {len(model.class_names)} classes ({', '.join(model.class_names[:5])}, ...): "
            "import the ImageNet model with dataset=imagenet16:<path>, or use readout=own"
        )
    return own_classes(model, p)


READOUTS: dict[str, Readout] = {"own": own_classes, "imagenet16": imagenet16_decisions}


class DecisionsOptions(Options):
    """``evaluate.py images=FOLDER decisions.enabled=true``: decisions in the benchmark's raw-data format."""

    enabled: bool = Field(False, description="write benchmark raw-data decisions instead of model responses")
    label_pattern: str = Field(
        BENCHMARK_NAMES, description="regex on the file name with groups 'category' (required) and 'condition'"
    )
    readout: str = Field("own", description=f"decision readout: {', '.join(READOUTS)}")
    dataset: str | None = Field(None, description="dataset (folder) name of the output; default: the images folder's")

    @field_validator("label_pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as error:
            raise UserError(f"not a regular expression: {error}") from None
        if "category" not in compiled.groupindex:
            raise UserError("the pattern needs a named group 'category', e.g. '^(?P<category>[a-z]+)_'")
        return value

    @field_validator("readout")
    @classmethod
    def _readout(cls, value: str) -> str:
        if value not in READOUTS:
            raise UserError(f"unknown readout {value!r}; available: {', '.join(READOUTS)}")
        return value
