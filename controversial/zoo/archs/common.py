"""Pieces shared by architectures."""

from __future__ import annotations

import torch
from torch import nn

DATASET_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


class Normalize(nn.Module):
    """Per-channel standardisation inside the model, so every model takes images in [0,1]."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean) / self.std

    @classmethod
    def for_dataset(cls, dataset: str) -> "Normalize":
        mean, std = DATASET_STATS[dataset]
        return cls(mean, std)
