"""The generator parametrisation (``synthesis.parametrization=generator``): search a generator's latent space.

The optimiser moves w; the code is ``z = t * tanh(w / t)`` with ``t = synthesis.generator.truncation`` (a
smooth truncation: every coordinate stays within t prior standard deviations, where the generator was
trained to make images); the image is the generator's output for z (``synthesis/generators.py``). With
``synthesis.generator.residual = e > 0`` each image also has a bounded pixel residual: the image is
``clamp(G(z) + e * tanh(r), 0, 1)``, r one parameter per pixel starting at 0, so it stays within e of the
generator's image in every pixel (a generator's range alone may hold no controversial image for a pair).

A generator cannot reproduce an arbitrary start image, so ``from_images`` draws w from the prior, N(0, I),
with a generator seeded by the start image's 8-bit bytes: one start image (a cell's noise for a given
seed, or a test image) always gives the same code, whatever else is in the batch, and a retry with a new
seed, whose noise differs, draws a new code. That is all the engine's starts, retries and resumed runs need.
"""

from __future__ import annotations

import zlib

import torch

from controversial.synthesis.generators import load_generator
from controversial.synthesis.options import PARAMETRIZATIONS, SynthesisOptions


def image_seed(image: torch.Tensor) -> int:
    """A 32-bit seed from an image's 8-bit bytes (torch's CPU generator keeps only the low 32 bits)."""
    return zlib.crc32(torch.round(image.detach().clamp(0, 1) * 255).to(torch.uint8).cpu().numpy().tobytes())


@PARAMETRIZATIONS.register("generator")
class GeneratorParametrization:
    """A latent code per image, truncated smoothly; see the module docstring."""

    def __init__(self, shape: tuple[int, int, int], options: SynthesisOptions) -> None:
        self.shape = shape
        self.net, self.latent_dim = load_generator(options.generator, shape)
        self.truncation = options.generator.truncation
        self.residual = options.generator.residual

    def code(self, params: torch.Tensor) -> torch.Tensor:
        """The truncated code z of parameters w (the first ``latent_dim`` of a row)."""
        return self.truncation * torch.tanh(params[:, : self.latent_dim] / self.truncation)

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        self.net.to(params.device)
        images = self.net(self.code(params))
        if self.residual == 0:
            return images
        offsets = self.residual * torch.tanh(params[:, self.latent_dim :].reshape(images.shape))
        return (images + offsets).clamp(0, 1)

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        draws = [
            torch.randn(self.latent_dim, generator=torch.Generator().manual_seed(image_seed(image))) for image in images
        ]
        codes = torch.stack(draws).to(images.device)
        if self.residual == 0:
            return codes
        return torch.cat([codes, codes.new_zeros(len(codes), images[0].numel())], 1)
