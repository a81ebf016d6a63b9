"""The contract between models and the synthesis loop: what the loop calls, and under which gradient mode.

The synthesis loop (``synthesis/engine.py``) optimises one fixed batch of images whose rows finish at
different steps. Some models keep inner state across those steps: ABS warm-starts its per-class latents
from the previous step's optimum, row by row. Such an architecture implements ``StatefulNet``; the loop
calls ``reset_state()`` before a new batch and ``set_active_rows(rows)`` before each step, so that row i
of the next call is element ``rows[i]`` of the batch. Stateless architectures implement neither.

Some models also take gradients inside their forward pass (ABS fits latents, JEM refines its input), so
scores without an outer gradient are computed under ``scoring()`` (``torch.no_grad``), never
``torch.inference_mode``, which would forbid the inner autograd; such models call ``require_autograd``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class StatefulNet(Protocol):
    """An architecture with warm-started inner state keyed by the row of a fixed synthesis batch."""

    def reset_state(self) -> None:
        """Forget all inner state: the next call starts cold."""

    def set_active_rows(self, rows: torch.Tensor) -> None:
        """The next call holds elements ``rows`` (a 1-D index tensor) of the batch begun at ``reset_state``."""


@runtime_checkable
class SynthesisModel(StatefulNet, Protocol):
    """What the synthesis loop needs of a model: calibrated logits of [0, 1] images, and the state hooks."""

    name: str

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) images in [0, 1] -> (N, K) calibrated logits."""


def scoring() -> torch.no_grad:
    """The gradient mode for scoring images without an outer gradient: ``no_grad``, not ``inference_mode``.

    Models that optimise inside their forward pass (ABS, JEM) need autograd there even while scoring.
    """
    return torch.no_grad()


def require_autograd(what: str) -> None:
    """Refuse to run under ``torch.inference_mode``, with an error that says what to use instead."""
    if torch.is_inference_mode_enabled():
        raise RuntimeError(f"{what} with autograd: call it under torch.no_grad(), not torch.inference_mode()")
