"""Class-conditional Gaussian kernel density estimator in pixel space.

``log p(x|y) = logsumexp_i(-||x - x_i||^2 / (2 sigma^2)) - log N_y - D/2 log(2 pi sigma^2)`` over
the training images of class y. The logits are these log-likelihoods. The training images are not
stored in the checkpoint (that would be 47 MB for MNIST): they are read from the data root.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from controversial.zoo.registry import register_arch


class GaussianKDE(nn.Module):
    def __init__(
        self, train_images: torch.Tensor, train_labels: torch.Tensor, sigma: float, chunk_size: int = 8192
    ) -> None:
        super().__init__()
        if sigma <= 0:
            raise ValueError(f"KDE bandwidth sigma must be positive, got {sigma}")
        self.sigma = float(sigma)
        self.chunk_size = chunk_size
        order = torch.argsort(train_labels, stable=True)
        # One sorted copy of the training set (CIFAR-10: 50,000 x 3,072 float32 = 614 MB) and its
        # norms, computed a chunk at a time so that no second full-size temporary is made.
        points = train_images.reshape(len(train_images), -1)[order].float().contiguous()
        self.register_buffer("points", points, persistent=False)
        self.register_buffer(
            "squared_norms", torch.cat([(c * c).sum(1) for c in points.split(chunk_size)]), persistent=False
        )
        counts = torch.bincount(train_labels, minlength=10)
        if (counts == 0).any():
            missing = ", ".join(str(int(k)) for k in torch.nonzero(counts == 0).flatten())
            raise ValueError(f"the KDE needs training images of every class; none of class {missing}")
        self.class_slices = [(int(s), int(s + c)) for s, c in zip(torch.cumsum(counts, 0) - counts, counts)]
        self.register_buffer("log_counts", counts.double().log().float(), persistent=False)

    def log_kernel_sums(self, flat: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """logsumexp over training images [start, stop) of -||x - x_i||^2 / (2 sigma^2), chunked."""
        partial = []
        x_norms = (flat**2).sum(1, keepdim=True)
        for lo in range(start, stop, self.chunk_size):
            hi = min(lo + self.chunk_size, stop)
            distances = x_norms - 2 * flat @ self.points[lo:hi].T + self.squared_norms[lo:hi]
            partial.append(torch.logsumexp(-distances.clamp_min(0) / (2 * self.sigma**2), dim=1))
        return torch.logsumexp(torch.stack(partial, 1), dim=1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        flat = images.reshape(len(images), -1)
        dim = flat.shape[1]
        const = 0.5 * dim * math.log(2 * math.pi * self.sigma**2)
        sums = torch.stack([self.log_kernel_sums(flat, lo, hi) for lo, hi in self.class_slices], 1)
        return sums - self.log_counts - const


@register_arch("gaussian_kde", training_data=True)
def gaussian_kde(
    dataset: str = "mnist",
    sigma: float = 0.3,
    data_root: str | None = None,
    train_images: torch.Tensor | None = None,
    train_labels: torch.Tensor | None = None,
) -> GaussianKDE:
    """Build from explicit training tensors (tests) or the training split under the data root."""
    if train_images is None or train_labels is None:
        from controversial.data import load_uint8

        images, train_labels = load_uint8(dataset, "train", data_root)
        train_images = images.float().div_(255.0)
    return GaussianKDE(train_images, train_labels, sigma)
