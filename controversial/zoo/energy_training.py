"""JEM's contrastive energy term (Grathwohl et al. 2020) for the fast CIFAR-10 recipe (``train.extra.energy``).

Langevin samples from a persistent replay buffer; every random draw comes from the recipe's CPU generator,
so a GPU run samples exactly as a CPU run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from controversial.errors import UserError
from controversial.zoo.archs.jem import energy_of_logits, langevin

ENERGY_STARTS = ("uniform", "class_gaussian")


@dataclass(frozen=True)
class EnergySettings:
    """JEM's generative term (Grathwohl et al. 2020) on top of the recipe's cross-entropy.

    From epoch ``start_epoch`` on (the epochs before are a cross-entropy warm start), each batch adds
    ``weight * (E(data) - E(samples))`` with ``E(x) = -logsumexp f(x)``: the samples come from
    ``sgld_steps`` Langevin steps ``x <- clamp(x - step_size dE/dx + N(0, noise^2), 0, 1)`` started
    from a persistent replay buffer of ``buffer_size`` images, each start replaced by a fresh one with
    probability ``reinit_prob``. Fresh starts are uniform noise or, with ``class_gaussian``, draws from
    per-class Gaussians fitted to the training images (JEM++), which keeps short chains near the data.
    ``energy_l2`` penalises the squared energies of data and samples, which keeps their scale in check
    (it costs the classifier nothing: a common shift of all logits moves the energy, not the softmax).
    ``max_grad_norm`` clips the gradient in these epochs: samples that are easy to tell from the data
    give the energy term gradient spikes (norms of 20-200 on a warm-started WRN-16-1), and without
    clipping every pilot diverged to NaN within three steps.
    In this phase every batch norm uses its running statistics, frozen at the warm start's values, so
    an image's energy never depends on the rest of its batch (samples and data alike).
    """

    start_epoch: int = 0
    sgld_steps: int = 5
    step_size: float = 0.25
    noise: float = 0.005
    buffer_size: int = 10000
    reinit_prob: float = 0.05
    buffer_init: str = "class_gaussian"
    weight: float = 1.0
    energy_l2: float = 0.0
    max_grad_norm: float | None = 1.0

    def __post_init__(self) -> None:
        if self.buffer_init not in ENERGY_STARTS:
            raise UserError(f"energy.buffer_init '{self.buffer_init}' unknown; allowed: {', '.join(ENERGY_STARTS)}")
        if self.sgld_steps < 1 or self.buffer_size < 1:
            raise UserError("energy.sgld_steps and energy.buffer_size must be >= 1")


def class_gaussian_sampler(
    images: torch.Tensor, labels: torch.Tensor
) -> Callable[[int, torch.Generator], torch.Tensor]:
    """Draws from per-class diagonal Gaussians fitted to the training images, clamped to [0, 1] (JEM++'s
    initialisation).

    Langevin chains started there are near the data from the first step, so a few steps suffice.
    """
    classes = labels.unique()
    means = torch.stack([images[labels == c].mean(0) for c in classes])
    stds = torch.stack([images[labels == c].std(0) for c in classes])

    def sample(count: int, generator: torch.Generator) -> torch.Tensor:
        picks = torch.randint(len(classes), (count,), generator=generator)
        noise = torch.randn((count, *images.shape[1:]), generator=generator)
        return (means[picks] + stds[picks] * noise).clamp(0, 1)

    return sample


def uniform_sampler(shape: tuple[int, ...]) -> Callable[[int, torch.Generator], torch.Tensor]:
    def sample(count: int, generator: torch.Generator) -> torch.Tensor:
        return torch.rand((count, *shape), generator=generator)

    return sample


def contrastive_energy(
    net: nn.Module,
    data_logits: torch.Tensor,
    buffer: torch.Tensor,
    settings: EnergySettings,
    fresh_starts: Callable[[int, torch.Generator], torch.Tensor],
    generator: torch.Generator,
    autocast: Callable[[], contextlib.AbstractContextManager],
    memory_format: torch.memory_format = torch.contiguous_format,
) -> tuple[torch.Tensor, float]:
    """JEM's term ``weight * (E(data) - E(samples))`` (plus the l2 penalty) and the energy gap; updates ``buffer``.

    The samples are drawn by Langevin steps from the replay buffer (see ``EnergySettings``); all random
    draws come from the CPU ``generator``, so a GPU run samples exactly as a CPU run.
    """
    device = data_logits.device
    count = len(data_logits)
    # distinct slots: with repeated indices, which sample ``buffer[picks] = samples`` keeps would
    # depend on thread scheduling, and a resumed run would no longer match an uninterrupted one
    picks = torch.randperm(len(buffer), generator=generator)[:count]
    fresh = torch.rand(count, generator=generator) < settings.reinit_prob
    starts = torch.where(fresh[:, None, None, None], fresh_starts(count, generator), buffer[picks])
    starts = starts.to(device).contiguous(memory_format=memory_format)
    noises = [
        settings.noise * torch.randn(starts.shape, generator=generator).to(device) for _ in range(settings.sgld_steps)
    ]

    def energy(x: torch.Tensor) -> torch.Tensor:
        with autocast():
            return energy_of_logits(net(x).float())

    samples = langevin(energy, starts, settings.step_size, noises, create_graph=False)
    buffer[picks] = samples.to(buffer.device)
    data_energy, sample_energy = energy_of_logits(data_logits.float()), energy(samples)
    gap = data_energy.mean() - sample_energy.mean()
    loss = settings.weight * gap
    if settings.energy_l2 > 0:
        loss = loss + settings.energy_l2 * (data_energy.pow(2).mean() + sample_energy.pow(2).mean())
    return loss, gap.item()


def freeze_batch_norm(net: nn.Module) -> None:
    """Every batch norm normalises with its running statistics and stops updating them (its affine part trains on)."""
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.eval()
