"""Image parametrisations: the optimiser moves unconstrained parameters, images stay in [0,1].

``pixel``: ``x = sigmoid(z)``, the paper's choice. ``fourier``: ``x = sigmoid(irfft(scale * w))``,
a decorrelated spectrum where every frequency is scaled by ``1/f^decay`` so that the optimiser
takes similar-sized steps on coarse and fine structure (the feature-visualisation trick). Optional
random jitter shifts the image by a few pixels at every step, a cheap robustness prior.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PARAMETRIZATIONS = ("pixel", "fourier")


def _logit(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    x = x.clamp(eps, 1 - eps)
    return torch.log(x) - torch.log1p(-x)


def _spectrum_scale(height: int, width: int, decay: float) -> torch.Tensor:
    fy = torch.fft.fftfreq(height)[:, None]
    fx = torch.fft.rfftfreq(width)[None, :]
    frequency = torch.sqrt(fx**2 + fy**2).clamp_min(1.0 / max(height, width))
    return frequency.pow(-decay) / frequency.pow(-decay).max()


@dataclass
class ImageParametrization:
    """Maps parameters to images and back; created once per synthesis batch."""

    kind: str
    shape: tuple[int, int, int]
    fourier_decay: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in PARAMETRIZATIONS:
            raise ValueError(f"unknown parametrization '{self.kind}'; allowed: {', '.join(PARAMETRIZATIONS)}")
        _, height, width = self.shape
        self._scale = _spectrum_scale(height, width, self.fourier_decay) if self.kind == "fourier" else None

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        """Parameters that reproduce ``images`` (up to the clamp away from exactly 0 and 1)."""
        z = _logit(images)
        if self.kind == "pixel":
            return z.clone()
        spectrum = torch.fft.rfft2(z, norm="ortho") / self._scale.to(z.device)
        return torch.view_as_real(spectrum).clone()

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        if self.kind == "pixel":
            return torch.sigmoid(params)
        _, height, width = self.shape
        spectrum = torch.view_as_complex(params) * self._scale.to(params.device)
        return torch.sigmoid(torch.fft.irfft2(spectrum, s=(height, width), norm="ortho"))


def jitter(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Roll every image by the same random offset in [-max_shift, max_shift] (reflect-free, circular)."""
    if max_shift <= 0:
        return images
    dy, dx = (torch.randint(-max_shift, max_shift + 1, (2,), generator=generator)).tolist()
    return torch.roll(images, shifts=(dy, dx), dims=(-2, -1))


def level_change(previous: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Largest per-image pixel change, in 8-bit intensity levels (for the convergence rule)."""
    return (current - previous).abs().flatten(1).amax(1) * 255.0


def quantize(images: torch.Tensor) -> torch.Tensor:
    """The 8-bit image people will see: round(255 x) / 255."""
    return torch.round(images.clamp(0, 1) * 255.0) / 255.0
