"""The preprocessing an imported classifier expects, applied inside the model.

Synthesis optimises images in [0, 1] at the size people see (the dataset's), so everything a model
trained elsewhere expects of its input (its resolution, three channels, its normalisation) happens in
the forward pass, differentiably, exactly once: the wrapped network never sees anything else.

Resizing is bilinear, with antialiasing when the model's input is smaller than the image. Without it,
a 224 px image shrunk to 32 px reaches the network through about 2% of its pixels (the rest get zero
gradient), so synthesis could paint the other 98% freely and people would see a pattern the model never
saw. With antialiasing every pixel contributes, as it does when an image folder is resized with PIL for
training. Upsampling (32 px images for a 224 px model) is the same with or without it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError


class Preprocess(nn.Module):
    """[0, 1] images (N, C, H, W) -> the network's input: resized to ``input_size``, 1 -> 3 channels, normalised.

    ``mean``/``std`` are buffers outside the state dict: they are rebuilt from the checkpoint's
    ``arch_kwargs``, so the stored weights stay exactly the network's own.
    """

    def __init__(self, input_size: Sequence[int], mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        channels, height, width = (int(v) for v in input_size)
        if len(mean) != channels or len(std) != channels:
            raise UserError(
                f"mean={list(mean)} and std={list(std)} need one value per input channel ({channels}, from "
                f"input_size={list(input_size)})"
            )
        if any(s <= 0 for s in std):
            raise UserError(f"std={list(std)}: every standard deviation must be positive")
        self.input_size = (channels, height, width)
        self.mean: torch.Tensor
        self.std: torch.Tensor
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        channels, height, width = self.input_size
        if images.shape[1] != channels:
            if images.shape[1] != 1:
                raise UserError(
                    f"the model takes {channels}-channel images but was given {images.shape[1]} channels; "
                    "only greyscale images are converted (to 3 equal channels)"
                )
            images = images.expand(-1, channels, -1, -1)
        if tuple(images.shape[-2:]) != (height, width):
            shrinking = images.shape[-2] > height or images.shape[-1] > width
            images = F.interpolate(images, (height, width), mode="bilinear", align_corners=False, antialias=shrinking)
        return (images - self.mean) / self.std


class Imported(nn.Module):
    """A network trained elsewhere, behind its preprocessing and (ImageNet models on 16 classes) a readout."""

    def __init__(self, net: nn.Module, preprocess: Preprocess, readout: nn.Module | None = None) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.net = net
        self.readout = readout if readout is not None else nn.Identity()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.readout(self.net(self.preprocess(images)))
