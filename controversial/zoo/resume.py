"""Per-epoch training state, so that a long training run can span several sessions.

After every epoch the training loop writes everything the rest of the run depends on - weights
(with batch-norm statistics), optimizer, learning-rate schedule, its random generator, torch's
global generator (dropout), the epoch count, the training seconds so far and method state such as
JEM's replay buffer - to one file, atomically. A re-run with the same settings loads it and continues
after the last finished epoch, ending with exactly the weights an uninterrupted run would have.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from controversial.atomic import atomic_write_bytes
from controversial.errors import UserError

FORMAT_VERSION = 1


class ResumeMismatchError(UserError):
    """The resume file belongs to a run with other settings; the message says how to proceed."""


class Scheduler(Protocol):
    """What a resume file needs of a learning-rate schedule: its state (torch's ``LRScheduler``, timm's
    schedulers, which do not derive from it, and any other with the same two methods)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ResumeFile:
    """Where the state goes, and what identifies the run (model, architecture, training settings).

    A file written under another identity is refused rather than silently mixed into this run.
    """

    path: Path
    identity: dict[str, Any]


def _canonical(identity: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


@dataclass(frozen=True)
class TrainingProgress:
    epochs_done: int
    train_seconds: float  # summed over every session that worked on the run


def save_training_state(
    resume: ResumeFile,
    progress: TrainingProgress,
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Scheduler,
    generator: torch.Generator,
    method_state: dict[str, torch.Tensor],
) -> None:
    payload = {
        "format_version": FORMAT_VERSION,
        "identity": _canonical(resume.identity),
        "epochs_done": progress.epochs_done,
        "train_seconds": progress.train_seconds,
        "net": net.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "generator": generator.get_state(),
        "torch_rng": torch.get_rng_state(),
        "method_state": method_state,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(resume.path, buffer.getvalue())


def load_training_state(
    resume: ResumeFile,
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Scheduler,
    generator: torch.Generator,
    method_state: dict[str, torch.Tensor],
) -> TrainingProgress:
    """Restore everything in place and return how far the run had got."""
    payload = _read(resume.path)
    recorded, current = payload["identity"], _canonical(resume.identity)
    if recorded != current:
        changed = sorted(k for k in recorded.keys() | current.keys() if recorded.get(k) != current.get(k))
        details = "; ".join(f"{k}: {recorded.get(k)!r} -> {current.get(k)!r}" for k in changed)
        raise ResumeMismatchError(
            f"{resume.path} was written by a run with other settings ({details}). Resume with the "
            "recorded settings, or start over with resume=false (or delete the file)."
        )
    if set(payload["method_state"]) != set(method_state):
        raise ResumeMismatchError(
            f"{resume.path} holds method state {sorted(payload['method_state'])}, "
            f"this method needs {sorted(method_state)}"
        )
    net.load_state_dict(payload["net"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    generator.set_state(payload["generator"])
    torch.set_rng_state(payload["torch_rng"])
    for name, tensor in method_state.items():
        tensor.copy_(payload["method_state"][name])
    return _progress(payload)


def recorded_progress(path: Path) -> TrainingProgress:
    """How far the run saved in ``path`` had got (e.g. its total training time, for the model card)."""
    return _progress(_read(path))


def _read(path: Path) -> dict[str, Any]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ResumeMismatchError(
            f"{path}: resume format {payload.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    return payload


def _progress(payload: dict[str, Any]) -> TrainingProgress:
    return TrainingProgress(int(payload["epochs_done"]), float(payload["train_seconds"]))
