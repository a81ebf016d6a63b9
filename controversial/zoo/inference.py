"""Inference-only rewrites of a trained network that keep its function and cut synthesis time.

Synthesis runs every model forward and backward to the input thousands of times with frozen
weights, so work that only matters for training is pure cost there. Folding each eval-mode batch
norm into the convolution before it removes two elementwise passes per layer forward and backward
and changes logits by float rounding only. Plain convolution stacks also run faster with
channels-last activations on a CPU (oneDNN's native layout); capsule networks, whose routing
reshapes the activations, run slower, so each architecture opts in. Measured effects:
docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from controversial.errors import UserError

if TYPE_CHECKING:
    from controversial.zoo.readout import CalibratedModel

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def fold_batch_norms(module: nn.Module) -> int:
    """Fold every BatchNorm directly after a Conv in an ``nn.Sequential`` into that Conv, in place.

    The module must be in eval mode (running statistics are used). Returns how many were folded.
    """
    if module.training:
        raise UserError("fold_batch_norms needs an eval-mode module: folding freezes the running statistics")
    folded = 0
    for child in module.modules():
        if not isinstance(child, nn.Sequential):
            continue
        for index in range(len(child) - 1):
            conv, norm = child[index], child[index + 1]
            if (
                isinstance(conv, CONVOLUTIONS)
                and isinstance(norm, BATCH_NORMS)
                and norm.track_running_stats
                and norm.num_features == conv.out_channels
            ):
                child[index] = fuse_conv_bn_eval(conv, norm)
                child[index + 1] = nn.Identity()
                folded += 1
    return folded


def use_preferred_memory_format(module: nn.Module) -> bool:
    """Convert ``module`` to channels-last in place if its class sets ``channels_last_inference``.

    Returns whether it was converted.
    """
    if not getattr(module, "channels_last_inference", False):
        return False
    module.to(memory_format=torch.channels_last)
    return True


def compile_networks(models: Sequence[CalibratedModel]) -> None:
    """Wrap each model's network in ``torch.compile(dynamic=True)``, in place (``synthesis.torch_compile``).

    ``dynamic=True`` because the synthesis batch shrinks as cells finish; a fixed-shape compile would
    recompile at every size. The calibration stays outside the compiled graph (two scalars).
    """
    for model in models:
        model.net = cast(nn.Module, torch.compile(model.net, dynamic=True))  # an OptimizedModule
