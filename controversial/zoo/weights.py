"""An imported model's weights: read from the user's file (state dict, training checkpoint or safetensors),
hashed for the record, and loaded strictly with an error that names the keys that do not fit."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from controversial.errors import UserError

MAX_LISTED_KEYS = 5


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from ``path``: a ``.safetensors`` file, a saved state dict, or a training checkpoint holding
    one under ``state_dict`` or ``model``; a ``module.`` prefix (DataParallel) is dropped."""
    if not path.is_file():
        raise UserError(f"weights={path}: no such file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state: Any = load_file(str(path))
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise UserError(
                f"weights={path} cannot be read as a PyTorch file of tensors ({type(error).__name__}: "
                f"{str(error).splitlines()[0]}). Save the weights with torch.save(model.state_dict(), path): "
                "only tensors and plain data are read (torch.load with weights_only=True), never a pickled model "
                "or other objects, whose loading could run code"
            ) from None
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(
            f"weights={path} holds a {type(state).__name__} that is not a state dict (names -> tensors), nor a "
            "checkpoint with one under 'state_dict' or 'model'; save it with torch.save(model.state_dict(), path)"
        )
    if state and all(k.startswith("module.") for k in state):
        state = {k.removeprefix("module."): v for k, v in state.items()}
    return state


def _listed(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:MAX_LISTED_KEYS])
    return f"{len(keys)} ({shown}{', ...' if len(keys) > MAX_LISTED_KEYS else ''})"


def load_weights(net: nn.Module, state: dict[str, torch.Tensor], path: Path, source: str) -> None:
    """Load ``state`` into ``net`` strictly; keys that do not match are one error naming them and their counts."""
    expected = net.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    mismatched = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or mismatched:
        parts = [
            f"missing keys {_listed(missing)}" if missing else "",
            f"unexpected keys {_listed(unexpected)}" if unexpected else "",
            f"shape mismatches (file vs model) {_listed(mismatched)}" if mismatched else "",
        ]
        raise UserError(
            f"weights={path} do not fit source={source} ({len(expected)} tensors expected, the file has "
            f"{len(state)}): {'; '.join(p for p in parts if p)}. Check the architecture name and arch_kwargs "
            "(e.g. the number of classes, a different depth or width) against the script that trained it"
        )
    net.load_state_dict(state, strict=True)
