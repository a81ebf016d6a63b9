"""Capsule network (Sabour et al. 2017): primary capsules, routing-by-agreement to ten digit capsules.

Two readouts of the same weights: ``length`` (a class's logit is the logit of its capsule's length,
which lies in (0, 1)) and ``reconstruction`` (a class's logit is minus the squared error of the
decoder's reconstruction from that class's capsule alone).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError
from controversial.zoo.archs.common import Normalize
from controversial.zoo.registry import register_arch

READOUTS = ("length", "reconstruction")


def squash(vectors: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """Shrink a vector's length into [0, 1) keeping its direction: ``|s|^2 / (1 + |s|^2) * s / |s|``."""
    squared = (vectors * vectors).sum(dim, keepdim=True)
    return vectors * (squared / (1 + squared) / torch.sqrt(squared + eps))


def route(predictions: torch.Tensor, iterations: int) -> torch.Tensor:
    """Dynamic routing by agreement.

    ``predictions`` (N, inputs, outputs, dim) are every input capsule's vote for every output
    capsule. Coupling logits start at zero; each iteration turns them into a softmax over outputs,
    forms the squashed weighted vote per output, and raises the logits by each vote's agreement
    (dot product) with that output. Returns the output capsules (N, outputs, dim).
    """
    if iterations < 1:
        raise UserError(f"routing needs at least one iteration, got {iterations}")
    coupling_logits = predictions.new_zeros(predictions.shape[:3])
    for iteration in range(iterations):
        coupling = coupling_logits.softmax(dim=2)
        outputs = squash((coupling.unsqueeze(-1) * predictions).sum(dim=1))
        if iteration < iterations - 1:
            coupling_logits = coupling_logits + (predictions * outputs.unsqueeze(1)).sum(-1)
    return outputs


class CapsNet(nn.Module):
    def __init__(
        self,
        conv_channels: int = 64,
        primary_types: int = 8,
        primary_dim: int = 8,
        digit_dim: int = 16,
        routing_iterations: int = 3,
        decoder_hidden: tuple[int, ...] = (256, 512),
        readout: str = "length",
        image_side: int = 28,
    ) -> None:
        super().__init__()
        if readout not in READOUTS:
            raise UserError(f"unknown capsnet readout '{readout}'; allowed: {', '.join(READOUTS)}")
        self.readout = readout
        self.primary_types, self.primary_dim, self.digit_dim = primary_types, primary_dim, digit_dim
        self.routing_iterations = routing_iterations
        self.image_side = image_side
        self.normalize = Normalize.for_dataset("mnist")
        self.conv = nn.Conv2d(1, conv_channels, 9)
        self.primary = nn.Conv2d(conv_channels, primary_types * primary_dim, 9, stride=2)
        grid = ((image_side - 8) - 9) // 2 + 1
        n_primary = primary_types * grid * grid
        self.votes = nn.Parameter(0.05 * torch.randn(n_primary, 10, digit_dim, primary_dim))
        layers: list[nn.Module] = []
        width = 10 * digit_dim
        for hidden in decoder_hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            width = hidden
        self.decoder = nn.Sequential(*layers, nn.Linear(width, image_side * image_side), nn.Sigmoid())

    def capsules(self, images: torch.Tensor) -> torch.Tensor:
        """The ten digit capsules (N, 10, digit_dim); their lengths are class presences in (0, 1)."""
        features = F.relu(self.conv(self.normalize(images)))
        primary = self.primary(features)  # (N, types * dim, g, g)
        n, _, g, _ = primary.shape
        primary = primary.view(n, self.primary_types, self.primary_dim, g, g).permute(0, 1, 3, 4, 2)
        primary = squash(primary.reshape(n, -1, self.primary_dim))
        predictions = torch.einsum("ijdp,nip->nijd", self.votes, primary)
        return route(predictions, self.routing_iterations)

    def reconstruct(self, capsules: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """Decode from one capsule per image (the others masked to zero), rescaled to unit length.

        Unit length, in training and in the readout, so the decoder explains the image from the
        capsule's pose alone; its length is what the length readout already measures.
        """
        chosen = capsules[torch.arange(len(capsules)), classes]
        chosen = chosen / chosen.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        masked = torch.zeros_like(capsules)
        masked[torch.arange(len(capsules)), classes] = chosen
        return self.decoder(masked.flatten(1)).view(-1, 1, self.image_side, self.image_side)

    def reconstruction_errors(self, images: torch.Tensor, capsules: torch.Tensor) -> torch.Tensor:
        """Summed squared pixel error of each class's reconstruction (N, 10)."""
        n = len(images)
        classes = torch.arange(10).repeat(n)
        recon = self.reconstruct(capsules.repeat_interleave(10, dim=0), classes).view(n, 10, -1)
        return ((recon - images.flatten(1).unsqueeze(1)) ** 2).sum(-1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        capsules = self.capsules(images)
        if self.readout == "reconstruction":
            return -self.reconstruction_errors(images, capsules)
        length = capsules.norm(dim=-1).clamp(1e-6, 1 - 1e-6)
        return torch.log(length) - torch.log1p(-length)


@register_arch("capsnet")
def capsnet(**kwargs) -> CapsNet:
    return CapsNet(**kwargs)
