"""A model's ``train:`` block as plain data, and the names of the choices it and the readout offer.

Torch-free on purpose: every command's settings are validated against these names, and a command that
never touches a model (the study server, its export) must not pay torch's import. The implementations
(``zoo.training.AUGMENTATIONS``, ``zoo.readout.fit_calibration``) are keyed by the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AUGMENTATION_NAMES = ("shift", "crop_flip")
CALIBRATION_METHODS = ("cross_entropy", "median")


@dataclass
class TrainSettings:
    method: str = "supervised"  # a key of controversial.zoo.training.TRAINING_METHODS
    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    seed: int = 0
    max_shift: int = 0  # random translation augmentation, in pixels
    augment: str = "shift"  # one of AUGMENTATION_NAMES: how max_shift is applied
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific: the method's ``extra`` schema
