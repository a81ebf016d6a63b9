"""Training routines, one per model family, plus the shared evaluate-calibrate-save epilogue.

Each method is declared once, in ``TRAINING_METHODS`` (or, for a family that lives elsewhere, with
``register_training_method``), together with what is special about it: whether it can resume, and
the typed schema of its ``train.extra`` settings, so that a typo in a model YAML is an error.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

import torch
import torch.nn.functional as F
from torch import nn

from controversial.zoo.fast_training import FastRecipe, batch_augment, train_fast
from controversial.zoo.protocol import scoring
from controversial.zoo.readout import IDENTITY, Calibration, fit_calibration, sigmoid_nll
from controversial.zoo.train_settings import TrainSettings
from controversial.zoo.resume import ResumeFile, TrainingProgress, load_training_state, save_training_state

log = logging.getLogger(__name__)


Progress = Callable[[str], None]


@dataclass(frozen=True)
class TrainOutcome:
    """What a method found beyond the weights: constructor arguments it chose (the KDE's bandwidth), and
    figures behind that choice, recorded in the checkpoint's ``train_config.extra``."""

    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NoExtra:
    """The schema of a method that takes no ``train.extra`` settings."""


@dataclass(frozen=True)
class TrainingMethod:
    """A training method, declared once with its properties.

    ``train(net, images, labels, settings, progress[, resume=][, monitor=])`` trains ``net`` in place and
    may return a ``TrainOutcome``; ``resumable`` methods take ``resume=`` and save their state every
    epoch; ``extra`` is a dataclass of the settings ``train.extra`` may hold (defaults included).
    """

    train: Callable[..., TrainOutcome | None]
    resumable: bool = False
    extra: type = NoExtra
    monitored: bool = False  # takes ``monitor=``, a per-epoch test-accuracy line for the log (never steers training)
    any_device: bool = False  # trains on the device the network is on (``device=cuda``); others are CPU-only

    def options(self, extra: Mapping[str, Any]) -> Any:
        """``train.extra`` as an instance of the schema; an unknown key, a wrong type or a missing value is an error.

        A schema with nested settings may parse them itself, as a ``from_extra`` class method (``FastRecipe``).
        """
        parse = getattr(self.extra, "from_extra", None)
        if parse is not None:
            return parse(dict(extra))
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(self.extra), dict(extra)))
        except Exception as error:
            allowed = ", ".join(self.extra.__dataclass_fields__) or "none"
            raise ValueError(f"train.extra: {str(error).splitlines()[0]} (allowed keys: {allowed})") from None


def options(settings: TrainSettings) -> Any:
    """The typed ``train.extra`` settings of ``settings.method``."""
    return training_method(settings.method).options(settings.extra)


def _random_shift(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    if max_shift <= 0:
        return images
    padded = F.pad(images, (max_shift,) * 4)
    dx, dy = torch.randint(0, 2 * max_shift + 1, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


AUGMENTATIONS: dict[str, Callable[[torch.Tensor, int, torch.Generator], torch.Tensor]] = {
    "shift": _random_shift,  # one shift of up to max_shift pixels for the whole batch (MNIST)
    "crop_flip": batch_augment,  # per image: crop after padding by max_shift, random horizontal flip (CIFAR-10)
}


def augment(images: torch.Tensor, settings: TrainSettings, generator: torch.Generator) -> torch.Tensor:
    if settings.augment not in AUGMENTATIONS:
        raise ValueError(f"model.train.augment '{settings.augment}' unknown; allowed: {', '.join(AUGMENTATIONS)}")
    return AUGMENTATIONS[settings.augment](images, settings.max_shift, generator)


BatchLoss = Callable[[torch.Tensor, torch.Generator, int, int], tuple[torch.Tensor, dict[str, float]]]


def _minibatch_training(
    net: nn.Module,
    n_images: int,
    settings: TrainSettings,
    progress: Progress,
    batch_loss: BatchLoss,
    describe: Callable[[dict[str, float]], str],
    resume: ResumeFile | None = None,
    method_state: dict[str, torch.Tensor] | None = None,
) -> None:
    """The loop every discriminative method shares: Adam, a one-cycle schedule, a seeded shuffle per epoch.

    ``batch_loss(batch_indices, generator, epoch, step)`` returns the loss and figures to average
    over the epoch; ``describe`` turns those epoch means into the progress line. With ``resume``,
    the whole state (plus ``method_state``, tensors the method updates in place) is saved after
    every epoch, and a run that finds the file continues after its last finished epoch.
    """
    method_state = method_state or {}
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = math.ceil(n_images / settings.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, settings.lr, total_steps=settings.epochs * steps_per_epoch
    )
    saved = TrainingProgress(0, 0.0)
    if resume is not None and resume.path.is_file():
        saved = load_training_state(resume, net, optimizer, scheduler, generator, method_state)
        progress(f"resumed from {resume.path}: {saved.epochs_done}/{settings.epochs} epochs already done")
    session_start = time.perf_counter()
    net.train()
    for epoch in range(saved.epochs_done, settings.epochs):
        order = torch.randperm(n_images, generator=generator)
        sums: dict[str, float] = {}
        for step in range(steps_per_epoch):
            batch = order[step * settings.batch_size : (step + 1) * settings.batch_size]
            loss, figures = batch_loss(batch, generator, epoch, step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            for name, value in figures.items():
                sums[name] = sums.get(name, 0.0) + value
        if resume is not None:
            seconds = saved.train_seconds + time.perf_counter() - session_start
            save_training_state(
                resume, TrainingProgress(epoch + 1, seconds), net, optimizer, scheduler, generator, method_state
            )
        progress(f"epoch {epoch + 1}/{settings.epochs}: " + describe({k: v / steps_per_epoch for k, v in sums.items()}))
    net.eval()


def _describe_loss(means: dict[str, float]) -> str:
    return f"train loss {means['loss']:.4f}"


def train_supervised(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainSettings,
    progress: Progress,
    resume: ResumeFile | None = None,
) -> None:
    """Cross-entropy training with Adam and a one-cycle learning-rate schedule."""

    def batch_loss(batch: torch.Tensor, generator: torch.Generator, epoch: int, step: int):
        x = augment(images[batch], settings, generator)
        loss = F.cross_entropy(net(x), labels[batch])
        return loss, {"loss": loss.item()}

    _minibatch_training(net, len(images), settings, progress, batch_loss, _describe_loss, resume)


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
    settings: TrainSettings,
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

    _minibatch_training(net, len(images), settings, progress, batch_loss, _describe_loss, resume)


def train_abs(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress
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
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress
) -> TrainOutcome:
    """Pick sigma from a grid by held-out likelihood (a per-class split of the training set)."""
    extra: KDEBandwidthExtra = options(settings)
    grid, n_held = [float(s) for s in extra.sigma_grid], extra.n_heldout
    generator = torch.Generator().manual_seed(settings.seed)
    order = torch.randperm(len(images), generator=generator)
    held, fit = order[:n_held], order[n_held:]
    scores = {}
    for sigma in grid:
        scores[sigma] = kde_heldout_loglik(images[fit], labels[fit], images[held], labels[held], sigma)
        progress(f"sigma {sigma:.3f}: held-out log-likelihood {scores[sigma]:.2f}")
    best = max(scores, key=scores.get)
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
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, extra: CapsuleExtra
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
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainSettings,
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

    _minibatch_training(net, len(images), settings, progress, batch_loss, describe, resume)


@dataclass(frozen=True)
class DeriveExtra:
    source: str  # the checkpoint to copy weights from, e.g. models/mnist/capsnet.pt


def derive_from_checkpoint(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress
) -> None:
    """No training: copy the weights of another bundled checkpoint (``extra.source``, e.g. models/mnist/capsnet.pt).

    For a second readout of an already trained network; the architecture kwargs may differ only in
    ones that do not change the parameters (such as the readout).
    """
    from controversial.zoo.checkpoints import read_checkpoint
    from controversial.zoo.bundled import PROJECT_ROOT

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
    settings: TrainSettings,
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

    _minibatch_training(net, len(images), settings, progress, batch_loss, describe, resume)


TRAINING_METHODS: dict[str, TrainingMethod] = {
    "supervised": TrainingMethod(train_supervised, resumable=True),
    "supervised_negatives": TrainingMethod(train_supervised_negatives, resumable=True, extra=NegativesExtra),
    "abs_vae": TrainingMethod(train_abs),
    "kde_bandwidth": TrainingMethod(select_kde_bandwidth, extra=KDEBandwidthExtra),
    "capsule": TrainingMethod(train_capsule, resumable=True, extra=CapsuleExtra),
    "derive": TrainingMethod(derive_from_checkpoint, extra=DeriveExtra),
    "adversarial": TrainingMethod(train_adversarial, resumable=True, extra=AdversarialExtra),
    "fast": TrainingMethod(train_fast, resumable=True, extra=FastRecipe, monitored=True, any_device=True),
}


def register_training_method(name: str, method: TrainingMethod) -> None:
    """Add a method from another module (a new family's own); duplicate names are refused."""
    if name in TRAINING_METHODS:
        raise ValueError(f"training method '{name}' is already registered")
    TRAINING_METHODS[name] = method


def training_method(name: str) -> TrainingMethod:
    """A registered method; unknown names get the list of valid ones."""
    if name not in TRAINING_METHODS:
        raise ValueError(f"model.train.method '{name}' unknown; allowed: {', '.join(TRAINING_METHODS)}")
    return TRAINING_METHODS[name]


@scoring()
def collect_logits(net: nn.Module, images: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """Raw logits for a whole split, batched."""
    return torch.cat([net(images[i : i + batch_size]) for i in range(0, len(images), batch_size)])


@dataclass(frozen=True)
class Evaluation:
    calibration: Calibration
    metrics: dict[str, float]


def evaluate_and_calibrate(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, method: str) -> Evaluation:
    """Test accuracy, the calibration fit on the test set (as in the paper), and NLL before/after."""
    logits = collect_logits(net, images)
    calibration = fit_calibration(method, logits, labels)
    calibrated = calibration.apply(logits.double())
    if not torch.equal(calibrated.argmax(1), logits.argmax(1)):
        raise AssertionError("calibration changed an arg-max; the slope must be positive")
    metrics = {
        "test_accuracy": float((logits.argmax(1) == labels).double().mean()),
        "test_nll_uncalibrated": sigmoid_nll(IDENTITY.apply(logits), labels),
        "test_nll_calibrated": sigmoid_nll(calibrated, labels),
        "n_test": len(labels),
    }
    return Evaluation(calibration, metrics)


def evenly_spaced(images: torch.Tensor, labels: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``n`` images taken every k-th (and k): test sets are often stored class by class, so the first n would not do."""
    stride = max(1, len(images) // n)
    return images[::stride][:n], labels[::stride][:n], stride


def robustness_metrics(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings
) -> dict[str, float]:
    """PGD accuracy at the training eps for adversarially trained models (empty for the others).

    ``eval_steps`` steps of ``eval_step_size`` (default 2.5 eps / steps) from a random start, on the
    ``eval_images`` test images evenly spaced through the test set: for ``adversarial`` from ``extra``
    (defaults 40 steps, 1000 images), for ``fast`` from ``extra.adversarial``.
    """
    if settings.method == "fast":
        adversarial = options(settings).adversarial
        if adversarial is None:
            return {}
        norm, eps, steps, n = adversarial.norm, adversarial.eps, adversarial.eval_steps, adversarial.eval_images
        step_size = adversarial.eval_step_size or 2.5 * eps / steps
    elif settings.method == "adversarial":
        extra: AdversarialExtra = options(settings)
        norm, eps, steps, n = extra.norm, extra.eps, extra.eval_steps, extra.eval_images
        step_size = 2.5 * eps / steps if extra.eval_step_size is None else extra.eval_step_size
    else:
        return {}
    from controversial.zoo.attacks import module_device, pgd_accuracy

    n = min(n, len(images))
    images, labels, stride = evenly_spaced(images, labels, n)
    accuracy = pgd_accuracy(net, images, labels, norm, eps, steps, step_size, seed=settings.seed)
    device = module_device(net)
    with torch.no_grad():
        clean = float((net(images.to(device)).argmax(1).cpu() == labels).double().mean())
    which = f"first {n}" if stride == 1 else f"every {stride}th of the {n * stride}"
    attack = f"{norm} eps {eps:g}, {steps} steps of {step_size:.3g}, random start, {which} test images"
    return {"pgd_attack": attack, "pgd_accuracy": accuracy, "clean_accuracy_same_images": clean}


def energy_metrics(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, n: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """For a joint energy model (one with ``energy`` and ``classifier``; empty for the others): how well its
    energy tells ``n`` test images (evenly spaced) from ``n`` uniform-noise images, as an AUROC, and the
    accuracy of its classifier without the refinement, on the whole test set.

    The AUROC is the probability that a noise image gets a higher energy than a test image (ties count
    half): the Mann-Whitney U statistic over the product of the sample sizes.
    """
    if not (callable(getattr(net, "energy", None)) and isinstance(getattr(net, "classifier", None), nn.Module)):
        return {}
    from scipy.stats import mannwhitneyu

    test_images, _, stride = evenly_spaced(images, labels, n)
    noise = torch.rand(test_images.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        test_energy, noise_energy = net.energy(test_images), net.energy(noise)
        unrefined = collect_logits(net.classifier, images)
    auroc = mannwhitneyu(noise_energy.double().numpy(), test_energy.double().numpy()).statistic / (n * len(noise))
    return {
        "energy_noise_auroc": float(auroc),
        "energy_noise_auroc_images": f"every {stride}th test image against as many uniform-noise images (seed {seed})",
        "test_accuracy_unrefined": float((unrefined.argmax(1) == labels).double().mean()),
    }
