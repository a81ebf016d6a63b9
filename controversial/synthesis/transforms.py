"""Transformation robustness: random small changes to the image before the models see it, every step.

A stimulus that stays controversial when shifted, zoomed and rotated a little cannot rest on one exact
arrangement of pixels, the adversarial-noise solution (the feature-visualisation literature's
"transformation robustness"; lucent's standard transforms pad, jitter, scale by up to 10% and rotate by
up to 10 degrees). Each option is off by default, and one draw per step applies to the whole batch, so an
element's updates do not depend on which others are still running. The final scores, on which acceptance
rests, are computed on the untransformed 8-bit image.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from controversial.synthesis.options import SynthesisOptions


def jitter(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Roll every image by the same random offset in [-max_shift, max_shift] (reflect-free, circular)."""
    if max_shift <= 0:
        return images
    dy, dx = (torch.randint(-max_shift, max_shift + 1, (2,), generator=generator)).tolist()
    return torch.roll(images, shifts=(dy, dx), dims=(-2, -1))


def scale_rotate(images: torch.Tensor, scale: float, degrees: float) -> torch.Tensor:
    """Zoom by ``scale`` and rotate by ``degrees`` about the centre (bilinear, reflected at the border);
    differentiable in the images."""
    angle = math.radians(degrees)
    cos, sin = math.cos(angle) / scale, math.sin(angle) / scale
    theta = torch.tensor([[cos, -sin, 0.0], [sin, cos, 0.0]], dtype=images.dtype, device=images.device)
    grid = F.affine_grid(theta.expand(len(images), 2, 3), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def transform(images: torch.Tensor, options: SynthesisOptions, generator: torch.Generator) -> torch.Tensor:
    """This step's random transformation: a jitter of up to ``options.jitter`` pixels, then a zoom in
    [1 - scale, 1 + scale] and a rotation in [-rotate, rotate] degrees (each only when set)."""
    images = jitter(images, options.jitter, generator)
    if options.scale == 0 and options.rotate == 0:
        return images
    u = torch.rand(2, generator=generator, dtype=torch.float64).tolist()
    factor = 1 + options.scale * (2 * u[0] - 1)
    return scale_rotate(images, factor, options.rotate * (2 * u[1] - 1))
