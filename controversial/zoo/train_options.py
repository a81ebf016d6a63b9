"""A model's ``train:`` block, and the registries of the choices it and the readout offer.

Torch-free on purpose: every command's settings are validated against these names, and a command that
never touches a model (the study server, its export) must not pay torch's import. Each registry names
the module that implements its built-in entries; that module is imported on first lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Callable

from pydantic import AfterValidator, Field

from controversial.options import Count, Options, Seed
from controversial.registry import Registry

if TYPE_CHECKING:
    import torch

    from controversial.zoo.readout import Calibration
    from controversial.zoo.training import TrainingMethod

TRAINING_METHODS: Registry[TrainingMethod] = Registry(
    "training method",
    builtins={
        "supervised": "controversial.zoo.training",
        "supervised_negatives": "controversial.zoo.training_methods",
        "abs_vae": "controversial.zoo.training_methods",
        "kde_bandwidth": "controversial.zoo.training_methods",
        "capsule": "controversial.zoo.training_methods",
        "derive": "controversial.zoo.training_methods",
        "adversarial": "controversial.zoo.training_methods",
        "fast": "controversial.zoo.fast_training",
    },
)
"""``train(net, images, labels, options, progress, ...)`` with its properties: see ``zoo.training.TrainingMethod``."""
TrainingMethodName = Annotated[str, AfterValidator(TRAINING_METHODS.check)]

Augmentation = Callable[["torch.Tensor", int, "torch.Generator"], "torch.Tensor"]
AUGMENTATIONS: Registry[Augmentation] = Registry(
    "augmentation",
    builtins={
        "shift": "controversial.zoo.training",  # one shift of up to max_shift pixels for the whole batch (MNIST)
        "crop_flip": "controversial.zoo.fast_training",  # per image: crop after padding, random flip (CIFAR-10)
    },
)
"""``augment(images, max_shift, generator) -> images``: how ``train.max_shift`` is applied to a batch."""
AugmentationName = Annotated[str, AfterValidator(AUGMENTATIONS.check)]

CalibrationFit = Callable[["torch.Tensor", "torch.Tensor"], "Calibration"]
CALIBRATIONS: Registry[CalibrationFit] = Registry(
    "calibration", builtins={"cross_entropy": "controversial.zoo.readout", "median": "controversial.zoo.readout"}
)
"""``fit(test_logits, test_labels) -> Calibration``: the shared slope and intercept of the sigmoid readout."""
CalibrationName = Annotated[str, AfterValidator(CALIBRATIONS.check)]
"""An option naming a registered calibration (likewise ``TrainingMethodName``, ``AugmentationName``): unknown
names are refused with the list of known ones."""


class TrainOptions(Options):
    """How a model is trained (a model YAML's ``train:`` block); the training methods take it as it is."""

    method: TrainingMethodName = Field(
        "supervised", description="training method (a name in zoo.train_options.TRAINING_METHODS)"
    )
    epochs: int = Field(3, ge=0, description="passes over the training set (0: methods without epochs)")
    batch_size: Count = Field(128, description="images per optimisation step")
    lr: float = Field(1e-3, gt=0, description="learning rate")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay")
    seed: Seed = 0
    max_shift: int = Field(0, ge=0, description="random translation augmentation, in pixels")
    augment: AugmentationName = Field(
        "shift", description=f"how max_shift is applied: {', '.join(AUGMENTATIONS.names())}"
    )
    extra: dict[str, Any] = Field(default_factory=dict, description="method-specific settings")
