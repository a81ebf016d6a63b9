"""Training routines, one per model family, plus the shared evaluate-calibrate-save epilogue."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from controversial.readout import IDENTITY, Calibration, fit_calibration, sigmoid_nll

log = logging.getLogger(__name__)


@dataclass
class TrainSettings:
    method: str = "supervised"  # a key of TRAINING_METHODS
    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    seed: int = 0
    max_shift: int = 0  # random translation augmentation, in pixels
    extra: dict[str, Any] = field(default_factory=dict)  # method-specific settings


Progress = Callable[[str], None]


def _random_shift(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    if max_shift <= 0:
        return images
    padded = F.pad(images, (max_shift,) * 4)
    dx, dy = torch.randint(0, 2 * max_shift + 1, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


def train_supervised(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress) -> None:
    """Cross-entropy training with Adam and a cosine learning-rate schedule."""
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = math.ceil(len(images) / settings.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, settings.lr, total_steps=settings.epochs * steps_per_epoch)
    net.train()
    for epoch in range(settings.epochs):
        order = torch.randperm(len(images), generator=generator)
        running = 0.0
        for step in range(steps_per_epoch):
            batch = order[step * settings.batch_size : (step + 1) * settings.batch_size]
            x = _random_shift(images[batch], settings.max_shift, generator)
            loss = F.cross_entropy(net(x), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item()
        progress(f"epoch {epoch + 1}/{settings.epochs}: train loss {running / steps_per_epoch:.4f}")
    net.eval()


def train_abs(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress) -> None:
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


def kde_heldout_loglik(train_x: torch.Tensor, train_y: torch.Tensor, held_x: torch.Tensor, held_y: torch.Tensor, sigma: float) -> float:
    """Mean log p(x | true class) of held-out images under a KDE fitted to the rest."""
    from controversial.archs.kde import GaussianKDE

    kde = GaussianKDE(train_x, train_y, sigma)
    with torch.inference_mode():
        logits = torch.cat([kde(held_x[i : i + 500]) for i in range(0, len(held_x), 500)])
    return float(logits.gather(1, held_y[:, None]).mean())


def select_kde_bandwidth(net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainSettings, progress: Progress) -> None:
    """Pick sigma from a grid by held-out likelihood (a per-class split of the training set)."""
    grid = [float(s) for s in settings.extra.get("sigma_grid", [0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.25])]
    n_held = int(settings.extra.get("n_heldout", 2000))
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
    settings.extra["heldout_loglik"] = {str(k): v for k, v in scores.items()}
    settings.extra["chosen_sigma"] = best


TRAINING_METHODS: dict[str, Callable[..., None]] = {
    "supervised": train_supervised,
    "abs_vae": train_abs,
    "kde_bandwidth": select_kde_bandwidth,
}


@torch.no_grad()
def collect_logits(net: nn.Module, images: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """Raw logits for a whole split, batched (ABS needs gradients inside, so no inference_mode)."""
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


def timed(function: Callable[[], None]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start
