"""The family-specific training methods: digits with non-digit negatives, the ABS VAEs, the KDE's bandwidth,
capsule networks, a derived readout, and multi-step adversarial training.

Each is registered in ``TRAINING_METHODS`` (``zoo/train_options.py`` names this module for them) with its
``train.extra`` schema; the discriminative ones run the shared loop of :mod:`controversial.zoo.training`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from controversial.zoo.resume import ResumeFile
from controversial.zoo.train_options import TRAINING_METHODS, TrainOptions
from controversial.zoo.training import (
    Progress,
    TrainingMethod,
    TrainOutcome,
    augment,
    describe_loss,
    minibatch_training,
    options,
)

if TYPE_CHECKING:
    from controversial.zoo.archs.abs_vae import AnalysisBySynthesis
    from controversial.zoo.archs.capsnet import CapsNet
    from controversial.zoo.archs.kde import GaussianKDE


def non_digit_images(count: int, digits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Images with no digit in them, in three equal kinds chosen to cover where synthesis wanders.

    Uniform pixel noise (the synthesis starting point), smooth random blobs (bilinearly upsampled
    7x7 noise, contrast-stretched: large stroke-free shapes), and training digits cut into a 4x4
    grid of 7x7 tiles and shuffled (digit-like local strokes without a digit's global shape).
    """
    side = digits.shape[-1]
    kinds = torch.arange(count) % 3
    out = torch.rand(count, 1, side, side, generator=generator)
    n_blobs = int((kinds == 1).sum())
    if n_blobs:
        coarse = torch.rand(n_blobs, 1, 7, 7, generator=generator)
        smooth = F.interpolate(coarse, size=(side, side), mode="bilinear", align_corners=False)
        out[kinds == 1] = ((smooth - 0.5) * 3 + 0.5).clamp(0, 1)
    n_tiles = int((kinds == 2).sum())
    if n_tiles:
        tile = side // 4
        source = digits[torch.randint(len(digits), (n_tiles,), generator=generator)]
        tiles = source.unfold(2, tile, tile).unfold(3, tile, tile).reshape(n_tiles, 1, 16, tile, tile)
        shuffled = torch.stack([t[:, torch.randperm(16, generator=generator)] for t in tiles])
        grid = shuffled.reshape(n_tiles, 1, 4, 4, tile, tile).permute(0, 1, 2, 4, 3, 5)
        out[kinds == 2] = grid.reshape(n_tiles, 1, side, side)
    return out


@dataclass(frozen=True)
class NegativesExtra:
    negative_fraction: float = 0.25  # non-digit images per batch, relative to the batch of digits


def train_supervised_negatives(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainOptions,
    progress: Progress,
    resume: ResumeFile | None = None,
) -> None:
    """Per-class sigmoid (binary cross-entropy) training with extra non-digit images whose ten targets are all zero.

    Sigmoid targets, not a softmax, because a softmax cannot say "no class"; ``extra.negative_fraction``
    sets how many negatives are added per batch, relative to the batch of digits.
    """
    fraction = options(settings).negative_fraction

    def batch_loss(batch: torch.Tensor, generator: torch.Generator, epoch: int, step: int):
        negatives = non_digit_images(max(1, round(fraction * len(batch))), images, generator)
        x = torch.cat([augment(images[batch], settings, generator), negatives])
        targets = torch.cat([F.one_hot(labels[batch], 10).float(), torch.zeros(len(negatives), 10)])
        loss = F.binary_cross_entropy_with_logits(net(x), targets, reduction="sum") / len(x)
        return loss, {"loss": loss.item()}

    minibatch_training(net, len(images), settings, progress, batch_loss, describe_loss, resume)


def train_abs(
    net: AnalysisBySynthesis, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions, progress: Progress
) -> None:
    """Each class's VAE on its own class only: one batch of every class per step (grouped layers)."""
    generator = torch.Generator().manual_seed(settings.seed)
    torch.manual_seed(settings.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr)
    flat = images.reshape(len(images), -1)
    by_class = [flat[labels == k] for k in range(10)]
    steps_per_epoch = min(len(c) for c in by_class) // settings.batch_size
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, settings.epochs * steps_per_epoch)
    net.train()
    for epoch in range(settings.epochs):
        orders = [torch.randperm(len(c), generator=generator) for c in by_class]
        running = 0.0
        for step in range(steps_per_epoch):
            window = slice(step * settings.batch_size, (step + 1) * settings.batch_size)
            batch = torch.stack([c[o[window]] for c, o in zip(by_class, orders)])
            loss = net.elbo_loss(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item()
        progress(f"epoch {epoch + 1}/{settings.epochs}: negative ELBO {running / steps_per_epoch:.2f}")
    net.eval()


def kde_heldout_loglik(
    train_x: torch.Tensor, train_y: torch.Tensor, held_x: torch.Tensor, held_y: torch.Tensor, sigma: float
) -> float:
    """Mean log p(x | true class) of held-out images under a KDE fitted to the rest."""
    from controversial.zoo.archs.kde import GaussianKDE

    kde = GaussianKDE(train_x, train_y, sigma)
    with torch.inference_mode():
        logits = torch.cat([kde(held_x[i : i + 500]) for i in range(0, len(held_x), 500)])
    return float(logits.gather(1, held_y[:, None]).mean())


@dataclass(frozen=True)
class KDEBandwidthExtra:
    sigma_grid: list[float] = field(default_factory=lambda: [0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25])
    n_heldout: int = 2000


def select_kde_bandwidth(
    net: GaussianKDE, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions, progress: Progress
) -> TrainOutcome:
    """Pick sigma from a grid by held-out likelihood (a per-class split of the training set)."""
    extra: KDEBandwidthExtra = options(settings)
    grid, n_held = [float(s) for s in extra.sigma_grid], extra.n_heldout
    generator = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(images), generator=generator)
    held, fit = order[:n_held], order[n_held:]
    scores: dict[float, float] = {}
    for sigma in grid:
        scores[sigma] = kde_heldout_loglik(images[fit], labels[fit], images[held], labels[held], sigma)
        progress(f"sigma {sigma:.3f}: held-out log-likelihood {scores[sigma]:.2f}")
    best = max(scores, key=scores.__getitem__)
    progress(f"chosen sigma {best}")
    net.sigma = best
    return TrainOutcome(
        arch_kwargs={"sigma": best},
        record={"heldout_loglik": {str(k): v for k, v in scores.items()}, "chosen_sigma": best},
    )


def capsule_margin_loss(
    lengths: torch.Tensor, labels: torch.Tensor, m_plus: float = 0.9, m_minus: float = 0.1, down_weight: float = 0.5
) -> torch.Tensor:
    """Sabour et al.'s margin loss: the true capsule longer than m+, the others shorter than m-; mean over images."""
    target = F.one_hot(labels, lengths.shape[1]).float()
    present = target * F.relu(m_plus - lengths) ** 2
    absent = down_weight * (1 - target) * F.relu(lengths - m_minus) ** 2
    return (present + absent).sum(1).mean()


@dataclass(frozen=True)
class CapsuleExtra:
    reconstruction_weight: float = 0.0005
    # Weight of a cross-entropy on the reconstruction readout's logits (-readout_scale x each class's
    # reconstruction error): it teaches the decoder that a wrong class's capsule must reconstruct the
    # image badly, which the true-class reconstruction loss alone never asks. 0: Sabour et al.'s loss.
    readout_weight: float = 0.0
    readout_scale: float = 0.1


def capsule_loss(
    net: CapsNet, images: torch.Tensor, labels: torch.Tensor, extra: CapsuleExtra
) -> tuple[torch.Tensor, dict[str, float]]:
    """The capsule network's training loss on one batch, and its parts for the log.

    Margin loss on capsule lengths plus ``reconstruction_weight`` x the summed squared error of the
    decoder's reconstruction from the true class's capsule (Sabour et al.); with ``readout_weight`` also
    a cross-entropy over every class's reconstruction error, so the reconstruction readout classifies.
    """
    capsules = net.capsules(images)
    margin = capsule_margin_loss(capsules.norm(dim=-1), labels)
    if extra.readout_weight > 0:
        errors = net.reconstruction_errors(images, capsules)
        reconstruction = errors.gather(1, labels.unsqueeze(1)).mean()
        readout = F.cross_entropy(-extra.readout_scale * errors, labels)
    else:
        reconstruction = ((net.reconstruct(capsules, labels) - images) ** 2).flatten(1).sum(1).mean()
        readout = torch.zeros((), device=images.device)
    loss = margin + extra.reconstruction_weight * reconstruction + extra.readout_weight * readout
    return loss, {"margin": margin.item(), "reconstruction": reconstruction.item(), "readout": readout.item()}


def train_capsule(
    net: CapsNet,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainOptions,
    progress: Progress,
    resume: ResumeFile | None = None,
) -> None:
    """Minibatch training of :func:`capsule_loss`, with the settings' augmentation."""
    extra = options(settings)

    def batch_loss(batch: torch.Tensor, generator: torch.Generator, epoch: int, step: int):
        return capsule_loss(net, augment(images[batch], settings, generator), labels[batch], extra)

    def describe(means: dict[str, float]) -> str:
        return (
            f"margin loss {means['margin']:.4f}, reconstruction SSE {means['reconstruction']:.2f}, "
            f"readout cross-entropy {means['readout']:.4f}"
        )

    minibatch_training(net, len(images), settings, progress, batch_loss, describe, resume)


@dataclass(frozen=True)
class DeriveExtra:
    source: str  # the checkpoint to copy weights from, e.g. models/mnist/capsnet.pt


def derive_from_checkpoint(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions, progress: Progress
) -> None:
    """No training: copy the weights of another bundled checkpoint (``extra.source``, e.g. models/mnist/capsnet.pt).

    For a second readout of an already trained network; the architecture kwargs may differ only in
    ones that do not change the parameters (such as the readout).
    """
    from controversial.zoo.bundled import PROJECT_ROOT
    from controversial.zoo.checkpoints import read_checkpoint

    source = Path(options(settings).source)
    source = source if source.is_absolute() else PROJECT_ROOT / source
    if not source.is_file():
        raise FileNotFoundError(
            f"{source} not found: train the source model first (python train.py model={source.stem})"
        )
    _, state = read_checkpoint(source)
    net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    progress(f"copied weights from {source}")
    net.eval()


@dataclass(frozen=True)
class AdversarialExtra:
    norm: str  # linf | l2
    eps: float
    steps: int
    step_size: float
    warmup_epochs: float = 0.0
    eval_steps: int = 40  # the evaluation attack (robustness_metrics)
    eval_step_size: float | None = None  # None: 2.5 eps / eval_steps
    eval_images: int = 1000


def train_adversarial(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainOptions,
    progress: Progress,
    resume: ResumeFile | None = None,
) -> None:
    """Madry-style adversarial training: cross-entropy on PGD examples only (random start).

    ``extra``: ``norm`` (linf or l2), ``eps``, ``steps``, ``step_size``, and ``warmup_epochs`` over
    which eps grows linearly from 0 (a curriculum that helps short schedules start learning).
    """
    from controversial.zoo.attacks import pgd

    extra: AdversarialExtra = options(settings)
    norm, eps, steps, step_size, warmup = extra.norm, extra.eps, extra.steps, extra.step_size, extra.warmup_epochs
    steps_per_epoch = math.ceil(len(images) / settings.batch_size)

    def current_eps(epoch: int, step: int) -> float:
        fraction = (epoch * steps_per_epoch + step) / (warmup * steps_per_epoch) if warmup > 0 else 1.0
        return eps * min(1.0, fraction)

    def batch_loss(batch: torch.Tensor, generator: torch.Generator, epoch: int, step: int):
        current = current_eps(epoch, step)
        x, y = augment(images[batch], settings, generator), labels[batch]
        net.eval()  # the attack sees the network as it will be used
        adversarial = pgd(net, x, y, norm, current, steps, step_size * current / eps, generator=generator)
        net.train()
        logits = net(adversarial)
        loss = F.cross_entropy(logits, y)
        return loss, {"loss": loss.item(), "accuracy": float((logits.argmax(1) == y).float().mean()), "eps": current}

    def describe(means: dict[str, float]) -> str:
        return (
            f"mean eps {means['eps']:.3f}, adversarial loss {means['loss']:.4f}, "
            f"adversarial train accuracy {100 * means['accuracy']:.1f}%"
        )

    minibatch_training(net, len(images), settings, progress, batch_loss, describe, resume)


TRAINING_METHODS.add(
    "supervised_negatives", TrainingMethod(train_supervised_negatives, resumable=True, extra=NegativesExtra)
)
TRAINING_METHODS.add("abs_vae", TrainingMethod(train_abs))
TRAINING_METHODS.add("kde_bandwidth", TrainingMethod(select_kde_bandwidth, extra=KDEBandwidthExtra))
TRAINING_METHODS.add("capsule", TrainingMethod(train_capsule, resumable=True, extra=CapsuleExtra))
TRAINING_METHODS.add("derive", TrainingMethod(derive_from_checkpoint, extra=DeriveExtra))
TRAINING_METHODS.add("adversarial", TrainingMethod(train_adversarial, resumable=True, extra=AdversarialExtra))
