"""Calibrated sigmoid readout: one slope and one intercept shared by all classes.

Every model is read out as ten independent detectors, ``p(class) = sigmoid(s * logit + t)``, so a
model can see several classes or none. ``s > 0`` and a shared ``t`` keep every arg-max unchanged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError
from controversial.zoo.protocol import StatefulNet
from controversial.zoo.train_options import CALIBRATIONS


@dataclass(frozen=True)
class Calibration:
    slope: float
    intercept: float
    method: str

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits * self.slope + self.intercept

    def to_dict(self) -> dict:
        return asdict(self)


IDENTITY = Calibration(1.0, 0.0, "identity")


def _one_hot(labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    return F.one_hot(labels.long(), n_classes).to(torch.float64)


@CALIBRATIONS.register("cross_entropy")
def fit_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, max_iter: int = 200) -> Calibration:
    """Minimise binary cross-entropy of the sigmoid outputs against one-hot labels (Experiment 1).

    The slope is optimised as ``exp(u)`` so it stays positive and the arg-max cannot flip.
    """
    z = logits.detach().to(torch.float64)
    targets = _one_hot(labels, z.shape[1])
    log_slope = torch.zeros((), dtype=torch.float64, requires_grad=True)
    intercept = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_slope, intercept], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(z * log_slope.exp() + intercept, targets, reduction="sum")
        loss = loss / z.shape[0]
        loss.backward()
        return loss

    optimizer.step(closure)
    return Calibration(log_slope.detach().exp().item(), intercept.detach().item(), "cross_entropy")


@CALIBRATIONS.register("median")
def fit_median_rule(logits: torch.Tensor, labels: torch.Tensor) -> Calibration:
    """Median negative entry -> p = 0.1 and median positive entry -> p = 0.9 (Experiment 2)."""
    z = logits.detach().to(torch.float64)
    positive = _one_hot(labels, z.shape[1]).bool()
    m_pos = float(z[positive].median())
    m_neg = float(z[~positive].median())
    if not m_pos > m_neg:
        raise UserError(
            f"median rule needs the median positive logit ({m_pos:.4g}) above the median negative one "
            f"({m_neg:.4g}); the model does not separate the classes"
        )
    slope = 2 * math.log(9) / (m_pos - m_neg)
    return Calibration(slope, -math.log(9) - slope * m_neg, "median")


def fit_calibration(method: str, logits: torch.Tensor, labels: torch.Tensor) -> Calibration:
    """The calibration registered as ``method`` (see ``zoo.train_options.CALIBRATIONS``), fit to these logits."""
    return CALIBRATIONS.get(method)(logits, labels)


def sigmoid_nll(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over images of the summed per-class binary cross-entropy (the calibration objective)."""
    z = logits.detach().to(torch.float64)
    loss = F.binary_cross_entropy_with_logits(z, _one_hot(labels, z.shape[1]), reduction="sum")
    return float(loss) / z.shape[0]


class MirrorAveraged(nn.Module):
    """Test-time augmentation: the mean of a classifier's logits for an image and its left-right mirror image.

    It makes a readout mirror-invariant, which is right only where the classes are (CIFAR-10, not
    digits), and buys accuracy that more training would cost far more of; each call runs the network
    on twice the batch. Training sees single views: this wraps a trained net for evaluation and use.
    """

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        if isinstance(net, StatefulNet):
            raise TypeError(f"{type(net).__name__} keeps per-row state; it cannot be run on mirrored copies")
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = self.net(torch.cat([images, images.flip(-1)]))
        return logits.unflatten(0, (2, len(images))).mean(0)


class CalibratedModel(nn.Module):
    """A classifier plus its calibration: images in [0,1] (N,C,H,W) -> calibrated logits (N,10)."""

    def __init__(
        self,
        net: nn.Module,
        calibration: Calibration,
        name: str,
        dataset: str,
        class_names: tuple[str, ...],
        test_accuracy: float | None = None,
    ) -> None:
        super().__init__()
        self.net = net
        self.test_accuracy = test_accuracy  # the model card's, so a reader can check a result is plausible
        self.calibration = calibration
        self.name = name
        self.dataset = dataset
        self.class_names = tuple(class_names)

    def raw_logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.calibration.apply(self.net(images))

    def probabilities(self, images: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.forward(images))

    def reset_state(self) -> None:
        """Forget warm-started inner state (e.g. ABS latents) before a new synthesis batch."""
        if isinstance(self.net, StatefulNet):
            self.net.reset_state()

    def set_active_rows(self, rows: torch.Tensor) -> None:
        """Tell a stateful net which elements of a fixed synthesis batch the next call holds."""
        if isinstance(self.net, StatefulNet):
            self.net.set_active_rows(rows)
