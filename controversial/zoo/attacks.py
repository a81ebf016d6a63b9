"""Projected gradient descent (Madry et al. 2018) in l-inf and l2 balls, for training and evaluation.

Images stay in [0, 1]; the perturbation starts at a random point of the ball and each step
ascends the cross-entropy (sign of the gradient for l-inf, the normalised gradient for l2), then
projects back onto the ball and the image range.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError

NORMS = ("linf", "l2")


def per_image_norm(t: torch.Tensor) -> torch.Tensor:
    return t.flatten(1).norm(dim=1).clamp_min(1e-12).view(-1, *([1] * (t.dim() - 1)))


def module_device(net: nn.Module) -> torch.device:
    """The device of a network's parameters (the CPU for a network without any)."""
    parameter = next(iter(net.parameters()), None)
    return torch.device("cpu") if parameter is None else parameter.device


def project(delta: torch.Tensor, norm: str, eps: float) -> torch.Tensor:
    """The closest perturbation inside the eps ball of the given norm."""
    if norm == "linf":
        return delta.clamp(-eps, eps)
    if norm == "l2":
        return delta * (eps / per_image_norm(delta)).clamp(max=1.0)
    raise UserError(f"unknown norm '{norm}'; allowed: {', '.join(NORMS)}")


def ball_start(images: torch.Tensor, norm: str, eps: float, generator: torch.Generator | None) -> torch.Tensor:
    """A perturbation drawn uniformly in the eps ball of ``norm`` (per image), on the images' device."""
    # Drawn on the CPU (where the generator lives), so the draws are the same on every device.
    if norm == "linf":
        return ((torch.rand(images.shape, generator=generator) * 2 - 1) * eps).to(images.device)
    direction = torch.randn(images.shape, generator=generator)
    radius = eps * torch.rand(len(images), generator=generator) ** (1 / images[0].numel())
    return (direction / per_image_norm(direction) * radius.view(-1, *([1] * (images.dim() - 1)))).to(images.device)


def pgd(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    norm: str,
    eps: float,
    steps: int,
    step_size: float,
    random_start: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Adversarial images within ``eps`` of ``images`` (in ``norm``) that raise the cross-entropy.

    The network's train/eval mode and its parameters' gradients are left as they were.
    """
    if norm not in NORMS:
        raise UserError(f"unknown norm '{norm}'; allowed: {', '.join(NORMS)}")
    images = images.detach()
    delta = ball_start(images, norm, eps, generator) if random_start else torch.zeros_like(images)
    delta = (images + delta).clamp(0, 1) - images
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = F.cross_entropy(net(images + delta), labels)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            step = grad.sign() if norm == "linf" else grad / per_image_norm(grad)
            delta = project(delta + step_size * step, norm, eps)
            delta = (images + delta).clamp(0, 1) - images
    return (images + delta).detach()


def pgd_accuracy(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    norm: str,
    eps: float,
    steps: int,
    step_size: float,
    batch_size: int = 250,
    seed: int = 0,
) -> float:
    """Accuracy under PGD (random start, fixed seed) on the given images, batched on the network's device."""
    generator = torch.Generator().manual_seed(seed)
    device = module_device(net)
    correct = 0
    for i in range(0, len(images), batch_size):
        x, y = images[i : i + batch_size].to(device), labels[i : i + batch_size].to(device)
        adversarial = pgd(net, x, y, norm, eps, steps, step_size, generator=generator)
        with torch.no_grad():
            correct += int((net(adversarial).argmax(1) == y).sum())
    return correct / len(images)
