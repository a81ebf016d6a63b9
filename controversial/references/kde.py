"""The KDE computed the plain way: every training image, autograd through everything.

This is how ``GaussianKDE`` computed its log-likelihoods before the certified candidate sums
(the norms trick, chunked, logsumexp per class). In float32 it is the old model, which
``benchmarks/synthesis.py`` times the new one against; in float64 it is the exact reference the
tests hold the new one to (1e-6 relative, values and input gradients).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from controversial.zoo.archs.kde import GaussianKDE


def full_sum_log_likelihoods(kde: GaussianKDE, images: torch.Tensor) -> torch.Tensor:
    """(N, 10) log-likelihoods over every training image, in the dtype of ``images``, differentiable."""
    flat = images.reshape(len(images), -1)
    x_norms = (flat**2).sum(1, keepdim=True)
    sums = []
    for lo, hi in kde.class_slices:
        partial = []
        for start in range(lo, hi, kde.chunk_size):
            stop = min(start + kde.chunk_size, hi)
            points = kde.points[start:stop].to(flat.dtype)
            distances = x_norms - 2 * flat @ points.T + kde.squared_norms[start:stop].to(flat.dtype)
            partial.append(torch.logsumexp(-distances.clamp_min(0) / (2 * kde.sigma**2), dim=1))
        sums.append(torch.logsumexp(torch.stack(partial, 1), dim=1))
    const = 0.5 * flat.shape[1] * math.log(2 * math.pi * kde.sigma**2)
    return torch.stack(sums, 1) - kde.log_counts.to(flat.dtype) - const


class FullSumKDE(nn.Module):
    """``full_sum_log_likelihoods`` as a module, to stand in for a ``GaussianKDE`` in synthesis."""

    def __init__(self, kde: GaussianKDE) -> None:
        super().__init__()
        self.kde = kde

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return full_sum_log_likelihoods(self.kde, images)
