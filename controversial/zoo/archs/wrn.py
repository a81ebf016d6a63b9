"""Wide residual network for 32x32 images (Zagoruyko & Komodakis 2016), pre-activation blocks.

timm's ResNets start with an ImageNet stem (7x7 stride-2 conv and max-pool), which leaves a
32x32 image 8x8 after the first layer, so the CIFAR form is built here: a 3x3 stem, three groups
of ``(depth - 4) / 6`` basic blocks of widths 16k, 32k and 64k (the last two start with stride 2),
then norm, ReLU, global average pooling and a linear readout. ``norm: none`` drops every
batch norm, as JEM does, so that SGLD samples never pass through batch statistics.
``stem_stride: 2`` makes the stem halve the image (32x32 -> 16x16), which cuts every later layer's
cost by four: what a model differentiated through many Langevin steps (JEM-20) needs on a CPU.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError
from controversial.zoo.archs.common import Normalize
from controversial.zoo.registry import register_arch

NORMS = ("batch", "none")


def _norm(kind: str, channels: int) -> nn.Module:
    return nn.BatchNorm2d(channels) if kind == "batch" else nn.Identity()


class PreActBlock(nn.Module):
    """norm-ReLU-conv3x3-norm-ReLU-dropout-conv3x3, plus the input (a 1x1 conv where the shape changes).

    The branch after the first activation is one ``nn.Sequential``, so that loading for inference
    folds its batch norm into the conv before it (controversial.zoo.inference).
    """

    def __init__(self, c_in: int, c_out: int, stride: int, dropout: float, norm: str) -> None:
        super().__init__()
        self.norm = _norm(norm, c_in)
        self.branch = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=norm == "none"),
            _norm(norm, c_out),
            nn.ReLU(),
            nn.Dropout(dropout) if dropout > 0 else nn.Identity(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=norm == "none"),
        )
        self.shortcut = None if stride == 1 and c_in == c_out else nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        activated = F.relu(self.norm(inputs))
        # The projection shortcut sees the activated input, as in the reference WRN.
        return self.branch(activated) + (inputs if self.shortcut is None else self.shortcut(activated))


class WideResNet(nn.Module):
    channels_last_inference = True  # faster on CPU at synthesis batch sizes (controversial.zoo.inference)

    def __init__(
        self,
        depth: int = 16,
        widen_factor: int = 4,
        dropout: float = 0.0,
        norm: str = "batch",
        dataset: str = "cifar10",
        stem_stride: int = 1,
    ) -> None:
        super().__init__()
        if (depth - 4) % 6 or depth < 10:
            raise UserError(f"WRN depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, ...), got {depth}")
        if norm not in NORMS:
            raise UserError(f"unknown WRN norm '{norm}'; allowed: {', '.join(NORMS)}")
        if stem_stride not in (1, 2):
            raise UserError(f"WRN stem_stride must be 1 or 2, got {stem_stride}")
        blocks_per_group = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.normalize = Normalize.for_dataset(dataset)
        self.stem = nn.Conv2d(1 if dataset == "mnist" else 3, widths[0], 3, stride=stem_stride, padding=1, bias=False)
        blocks: list[nn.Module] = []
        for group, (c_in, c_out) in enumerate(pairwise(widths)):
            for index in range(blocks_per_group):
                stride = 2 if group > 0 and index == 0 else 1
                blocks.append(PreActBlock(c_in if index == 0 else c_out, c_out, stride, dropout, norm))
        self.blocks = nn.Sequential(*blocks)
        self.final_norm = _norm(norm, widths[-1])
        self.readout = nn.Linear(widths[-1], 10)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = self.blocks(self.stem(self.normalize(images)))
        return self.readout(F.relu(self.final_norm(features)).mean(dim=(2, 3)))


@register_arch("wrn")
def wrn(**kwargs) -> WideResNet:
    return WideResNet(**kwargs)
