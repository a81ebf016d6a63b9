"""VGG family: stacks of 3x3 convolutions with batch norm, max-pooling after each stack, an MLP head.

``small_vgg`` is the MNIST model (two convs per stack); ``vgg16_bn`` is VGG-16 with batch norm for
32x32 images (13 convs in stacks of 2, 2, 3, 3, 3, then three linear layers) at chosen widths.
timm's VGG keeps the ImageNet head (a 7x7 conv MLP of 4,096 units), far over a 5 MB budget and
meaningless on the 1x1 map a 32x32 image leaves, so the head here is a plain MLP.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from controversial.errors import UserError
from controversial.zoo.archs.common import Normalize
from controversial.zoo.registry import register_arch

VGG16_CONVS_PER_STACK = (2, 2, 3, 3, 3)


class VGG(nn.Module):
    channels_last_inference = True  # faster on CPU at synthesis batch sizes (controversial.zoo.inference)

    def __init__(
        self,
        dataset: str = "mnist",
        widths: Sequence[int] = (32, 64),
        fc: int | Sequence[int] = 256,
        dropout: float = 0.3,
        convs_per_stack: int | Sequence[int] = 2,
    ) -> None:
        super().__init__()
        depths = [convs_per_stack] * len(widths) if isinstance(convs_per_stack, int) else list(convs_per_stack)
        if len(depths) != len(widths):
            raise UserError(f"convs_per_stack {convs_per_stack} needs one entry per width in {list(widths)}")
        in_channels = 1 if dataset == "mnist" else 3
        layers: list[nn.Module] = [Normalize.for_dataset(dataset)]
        for width, depth in zip(widths, depths):
            for _ in range(depth):
                layers += [nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
                in_channels = width
            layers.append(nn.MaxPool2d(2))
        side = (28 if dataset == "mnist" else 32) // 2 ** len(widths)
        if side < 1:
            raise UserError(f"{len(widths)} max-pools leave no pixels of a {dataset} image; use fewer widths")
        self.features = nn.Sequential(*layers)
        head: list[nn.Module] = [nn.Flatten()]
        width = in_channels * side * side
        for hidden in [fc] if isinstance(fc, int) else fc:
            head += [nn.Linear(width, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            width = hidden
        self.head = nn.Sequential(*head, nn.Linear(width, 10))

    def forward(self, images):
        return self.head(self.features(images))


@register_arch("small_vgg")
def small_vgg(**kwargs) -> VGG:
    return VGG(**kwargs)


@register_arch("vgg16_bn")
def vgg16_bn(
    widths: Sequence[int] = (64, 128, 256, 512, 512),
    fc: Sequence[int] = (512, 512),
    dropout: float = 0.5,
    dataset: str = "cifar10",
) -> VGG:
    """VGG-16: 13 convs (stacks of 2, 2, 3, 3, 3 at the five ``widths``) and three linear layers."""
    if len(widths) != len(VGG16_CONVS_PER_STACK) or len(fc) != 2:
        raise UserError(f"vgg16_bn needs 5 widths and 2 hidden fc sizes, got widths={list(widths)}, fc={list(fc)}")
    return VGG(dataset, widths, fc, dropout, VGG16_CONVS_PER_STACK)
