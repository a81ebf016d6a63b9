"""Joint energy-based model (Grathwohl et al. 2020): a classifier whose logits also define an energy.

``E(x) = -logsumexp_y f(x)[y]`` is an unnormalised negative log-density of images. "JEM-20" reads
an image out after refining it by Langevin dynamics on that energy:
``x <- clamp(x - step * dE/dx + noise, 0, 1)``, 20 times, then returns ``f`` of the refined image.
The steps are built with ``create_graph=True`` when the input needs a gradient, so synthesis
differentiates through the whole refinement.

The refinement noise is a fixed pattern per step, drawn once from ``noise_seed`` and shared by
every image, so the readout is a deterministic function of the image alone: the same image gives
the same logits in any batch, at any position, on every call. That keeps synthesis reproducible
(same seed, byte-identical stimuli) and lets calibration, synthesis and evaluation see one model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from controversial.errors import UserError
from controversial.zoo.protocol import require_autograd
from controversial.zoo.registry import create_arch, register_arch


def energy_of_logits(logits: torch.Tensor) -> torch.Tensor:
    return -torch.logsumexp(logits, dim=1)


def langevin(
    energy: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    step_size: float,
    noises: Sequence[torch.Tensor],
    create_graph: bool,
) -> torch.Tensor:
    """One step ``x <- clamp(x - step_size * dE/dx + noise, 0, 1)`` per noise tensor.

    With ``create_graph`` the result stays a differentiable function of ``images`` (which must then
    require grad); without it every step starts from a detached copy, which is cheaper.
    """
    x = images
    with torch.enable_grad():
        for noise in noises:
            if not create_graph:
                x = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(energy(x).sum(), x, create_graph=create_graph)
            x = (x - step_size * grad + noise).clamp(0, 1)
    return x if create_graph else x.detach()


class JointEnergyModel(nn.Module):
    channels_last_inference = True  # faster on CPU at synthesis batch sizes (controversial.zoo.inference)
    second_order_inference = True  # synthesis differentiates the refinement's input gradients (same module)
    refine_noises: torch.Tensor  # a buffer

    def __init__(
        self,
        backbone: str = "wrn",
        backbone_kwargs: dict[str, Any] | None = None,
        refine_steps: int = 20,
        refine_step_size: float = 0.25,
        refine_noise: float = 0.005,
        noise_seed: int = 0,
        image_shape: Sequence[int] = (3, 32, 32),
    ) -> None:
        super().__init__()
        if refine_steps < 0:
            raise UserError(f"refine_steps must be >= 0, got {refine_steps}")
        self.classifier = create_arch(backbone, **(backbone_kwargs or {}))
        self.refine_step_size = float(refine_step_size)
        generator = torch.Generator().manual_seed(noise_seed)
        noise = refine_noise * torch.randn((refine_steps, *image_shape), generator=generator)
        self.register_buffer("refine_noises", noise, persistent=False)  # rebuilt from noise_seed, not stored

    def energy(self, images: torch.Tensor) -> torch.Tensor:
        return energy_of_logits(self.classifier(images))

    def refine(self, images: torch.Tensor) -> torch.Tensor:
        """The refined images; differentiable with respect to ``images`` when they require grad."""
        require_autograd("JEM refines its input")
        create_graph = torch.is_grad_enabled() and images.requires_grad
        return langevin(self.energy, images, self.refine_step_size, list(self.refine_noises), create_graph)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.refine(images))


@register_arch("jem")
def jem(**kwargs) -> JointEnergyModel:
    return JointEnergyModel(**kwargs)
