"""Tiny randomly initialised classifiers, so tests never need trained weights."""

from __future__ import annotations

import torch
from torch import nn

from controversial.zoo.registry import register_arch


class TinyMLP(nn.Module):
    def __init__(
        self, image_shape: tuple[int, int, int] = (1, 28, 28), hidden: int = 16, seed: int = 0, n_classes: int = 10
    ) -> None:
        super().__init__()
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        n_inputs = image_shape[0] * image_shape[1] * image_shape[2]
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(n_inputs, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))
        torch.random.set_rng_state(generator_state)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images * 2 - 1) * 4


@register_arch("tiny_mlp")
def tiny_mlp(**kwargs) -> TinyMLP:
    return TinyMLP(**kwargs)
