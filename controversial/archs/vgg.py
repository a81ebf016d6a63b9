"""Small VGG: stacks of 3x3 convolutions with batch norm, max-pooling, and a small MLP head."""
from __future__ import annotations

from torch import nn

from controversial.archs.common import Normalize
from controversial.registry import register_arch


class SmallVGG(nn.Module):
    def __init__(self, dataset: str = "mnist", widths: tuple[int, ...] = (32, 64), fc: int = 256, dropout: float = 0.3) -> None:
        super().__init__()
        in_channels = 1 if dataset == "mnist" else 3
        layers: list[nn.Module] = [Normalize.for_dataset(dataset)]
        for width in widths:
            layers += [
                nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            in_channels = width
        side = (28 if dataset == "mnist" else 32) // 2 ** len(widths)
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(in_channels * side * side, fc), nn.ReLU(inplace=True), nn.Dropout(dropout), nn.Linear(fc, 10)
        )

    def forward(self, images):
        return self.head(self.features(images))


@register_arch("small_vgg")
def small_vgg(**kwargs) -> SmallVGG:
    return SmallVGG(**kwargs)
