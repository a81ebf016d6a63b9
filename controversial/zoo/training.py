"""Training: how a method is declared, the loop the discriminative methods share, and the shared
evaluate-calibrate epilogue.

Each method is registered once in ``TRAINING_METHODS`` (``zoo/train_options.py``) together with what is
special about it: whether it can resume, and the typed schema of its ``train.extra`` settings, so that a
typo in a model YAML is an error. The plain supervised method lives here; the family-specific ones in
``zoo/training_methods.py``, the fast CIFAR-10 recipe in ``zoo/fast_training.py``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from controversial.errors import UserError
from controversial.zoo.protocol import scoring
from controversial.zoo.readout import IDENTITY, Calibration, fit_calibration, sigmoid_nll
from controversial.zoo.resume import ResumeFile, TrainingProgress, load_training_state, save_training_state
from controversial.zoo.train_options import AUGMENTATIONS, TRAINING_METHODS, TrainOptions

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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
    extra: type[DataclassInstance] = NoExtra
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
            raise UserError(f"train.extra: {str(error).splitlines()[0]} (allowed keys: {allowed})") from None


def options(settings: TrainOptions) -> Any:
    """The typed ``train.extra`` settings of ``settings.method``."""
    return TRAINING_METHODS.get(settings.method).options(settings.extra)


@AUGMENTATIONS.register("shift")
def random_shift(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """One random translation of up to ``max_shift`` pixels (zero-padded) for the whole batch (MNIST)."""
    if max_shift <= 0:
        return images
    padded = F.pad(images, (max_shift,) * 4)
    dx, dy = torch.randint(0, 2 * max_shift + 1, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


def augment(images: torch.Tensor, settings: TrainOptions, generator: torch.Generator) -> torch.Tensor:
    """The batch after the augmentation ``settings.augment`` (see ``AUGMENTATIONS``)."""
    return AUGMENTATIONS.get(settings.augment)(images, settings.max_shift, generator)


BatchLoss = Callable[[torch.Tensor, torch.Generator, int, int], tuple[torch.Tensor, dict[str, float]]]


def minibatch_training(
    net: nn.Module,
    n_images: int,
    settings: TrainOptions,
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


def describe_loss(means: dict[str, float]) -> str:
    """The progress line of a method whose only figure is the loss."""
    return f"train loss {means['loss']:.4f}"


def train_supervised(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainOptions,
    progress: Progress,
    resume: ResumeFile | None = None,
) -> None:
    """Cross-entropy training with Adam and a one-cycle learning-rate schedule."""

    def batch_loss(batch: torch.Tensor, generator: torch.Generator, epoch: int, step: int):
        x = augment(images[batch], settings, generator)
        loss = F.cross_entropy(net(x), labels[batch])
        return loss, {"loss": loss.item()}

    minibatch_training(net, len(images), settings, progress, batch_loss, describe_loss, resume)


TRAINING_METHODS.add("supervised", TrainingMethod(train_supervised, resumable=True))


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
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions
) -> dict[str, float | str]:
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
        extra = options(settings)
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
    energy, classifier = getattr(net, "energy", None), getattr(net, "classifier", None)
    if not (callable(energy) and isinstance(classifier, nn.Module)):
        return {}
    from scipy.stats import mannwhitneyu

    test_images, _, stride = evenly_spaced(images, labels, n)
    noise = torch.rand(test_images.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        test_energy, noise_energy = energy(test_images), energy(noise)
        unrefined = collect_logits(classifier, images)
    auroc = mannwhitneyu(noise_energy.double().numpy(), test_energy.double().numpy()).statistic / (n * len(noise))
    return {
        "energy_noise_auroc": float(auroc),
        "energy_noise_auroc_images": f"every {stride}th test image against as many uniform-noise images (seed {seed})",
        "test_accuracy_unrefined": float((unrefined.argmax(1) == labels).double().mean()),
    }
