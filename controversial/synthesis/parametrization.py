"""Image parametrisations: the optimiser moves unconstrained parameters, images stay in [0,1].

Chosen by name from ``PARAMETRIZATIONS`` (``synthesis/options.py``), where a new one plugs in.

``pixel``: ``x = sigmoid(z)``, the paper's choice. ``fourier``: ``x = sigmoid(irfft(scale * w))``,
a decorrelated spectrum where every frequency is scaled by ``1/f^decay`` so that the optimiser
takes similar-sized steps on coarse and fine structure (the feature-visualisation trick). The priors
``cppn`` (``synthesis/cppn.py``) and ``generator`` (``synthesis/latent.py``) live in modules of their own;
random transformations before the models see the image are ``synthesis/transforms.py``.
"""

from __future__ import annotations

import torch

from controversial.synthesis.options import PARAMETRIZATIONS, Parametrization, SynthesisOptions


def _logit(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    x = x.clamp(eps, 1 - eps)
    return torch.log(x) - torch.log1p(-x)


def _spectrum_scale(height: int, width: int, decay: float) -> torch.Tensor:
    fy = torch.fft.fftfreq(height)[:, None]
    fx = torch.fft.rfftfreq(width)[None, :]
    frequency = torch.sqrt(fx**2 + fy**2).clamp_min(1.0 / max(height, width))
    return frequency.pow(-decay) / frequency.pow(-decay).max()


@PARAMETRIZATIONS.register("pixel")
class PixelParametrization:
    """``x = sigmoid(z)``, one parameter per pixel: the paper's choice."""

    def __init__(self, shape: tuple[int, int, int], options: SynthesisOptions) -> None:
        self.shape = shape

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        return _logit(images).clone()

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(params)


@PARAMETRIZATIONS.register("fourier")
class FourierParametrization:
    """``x = sigmoid(irfft(scale * w))``: a spectrum scaled by ``1/f^fourier_decay``, stored as real pairs."""

    def __init__(self, shape: tuple[int, int, int], options: SynthesisOptions) -> None:
        self.shape = shape
        _, height, width = shape
        self._scale = _spectrum_scale(height, width, options.fourier_decay)

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.rfft2(_logit(images), norm="ortho") / self._scale.to(images.device)
        return torch.view_as_real(spectrum).clone()

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        _, height, width = self.shape
        spectrum = torch.view_as_complex(params) * self._scale.to(params.device)
        return torch.sigmoid(torch.fft.irfft2(spectrum, s=(height, width), norm="ortho"))


def parametrization(options: SynthesisOptions, shape: tuple[int, int, int]) -> Parametrization:
    """The parametrisation ``options.parametrization`` of images of ``shape`` (C, H, W)."""
    return PARAMETRIZATIONS.get(options.parametrization)(shape, options)


def level_change(previous: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Largest per-image pixel change, in 8-bit intensity levels (for the convergence rule)."""
    return (current - previous).abs().flatten(1).amax(1) * 255.0


def quantize(images: torch.Tensor) -> torch.Tensor:
    """The 8-bit image people will see: round(255 x) / 255."""
    return torch.round(images.clamp(0, 1) * 255.0) / 255.0
