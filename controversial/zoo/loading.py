"""Loading the models a command names: the device, the checkpoint files, and what each checkpoint says it is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from controversial.config import ModelOptions
from controversial.errors import UserError
from controversial.zoo.checkpoints import load_checkpoint
from controversial.zoo.readout import CalibratedModel


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} was requested but no CUDA GPU is visible; use device=auto or device=cpu")
    return torch.device(name)


def load_models(specs: Sequence[ModelOptions], data_root: str | None, roles: Sequence[str]) -> list[CalibratedModel]:
    """Each model's checkpoint, refused when missing or when the file holds a model of another dataset."""
    models = []
    for spec, role in zip(specs, roles):
        path = Path(spec.checkpoint)
        if not path.is_file():
            raise UserError(
                f"no checkpoint for model '{spec.name}' at {path}. Train it with `python train.py "
                f"model={spec.name}` (its command and time: models/README.md), or point "
                f"{role}.checkpoint at a file."
            )
        model = load_checkpoint(path, data_root)
        if model.dataset != spec.dataset:
            raise UserError(
                f"{path} holds a {model.dataset} model, but {role}={spec.name} is declared as "
                f"{spec.dataset} in conf/model/{spec.name}.yaml; point {role}.checkpoint at its checkpoint."
            )
        models.append(model)
    return models
