"""The Madry et al. (2018) MNIST classifier: conv 5x5 - pool - conv 5x5 - pool - FC - linear readout.

What makes it "Madry" is its PGD adversarial training (controversial.zoo.training), not its layers.
"""

from __future__ import annotations

import torch
from torch import nn

from controversial.zoo.archs.common import Normalize
from controversial.zoo.registry import register_arch


class MadryConvNet(nn.Module):
    channels_last_inference = True  # faster on CPU at synthesis batch sizes (controversial.zoo.inference)

    def __init__(self, widths: tuple[int, int] = (32, 64), fc: int = 1024) -> None:
        super().__init__()
        first, second = widths
        self.net = nn.Sequential(
            Normalize.for_dataset("mnist"),
            nn.Conv2d(1, first, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(first, second, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(second * 7 * 7, fc),
            nn.ReLU(inplace=True),
            nn.Linear(fc, 10),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)


@register_arch("madry_mnist")
def madry_mnist(**kwargs) -> MadryConvNet:
    return MadryConvNet(**kwargs)
