"""Train a bundled generator: a variational autoencoder whose decoder becomes ``models/generators/<dataset>/<name>.pt``.

A VAE (Kingma & Welling 2014) rather than a GAN: on a CPU budget of minutes it trains stably and its
decoder covers the whole prior N(0, I), which is where the generator parametrisation searches. The loss is
the per-image binary cross-entropy of the decoder's pixels plus ``beta`` times the KL divergence of the
encoder's Gaussian from the prior. Only the decoder is kept; the encoder is a training aid.
"""

from __future__ import annotations

import logging
import time

import torch
import torch.nn.functional as F
from torch import nn

from controversial.synthesis.generators import ConvDecoder, MLPDecoder

log = logging.getLogger(__name__)


class ConvEncoder(nn.Module):
    """Two stride-2 convolutions and a linear layer to the Gaussian's mean and log-variance."""

    def __init__(self, latent_dim: int, channels: int, size: int, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, 4, 2, 1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(2 * width * (size // 4) ** 2, 2 * latent_dim),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_var = self.body(x).chunk(2, 1)
        return mean, log_var.clamp(-10, 10)


class MLPEncoder(nn.Module):
    """Two hidden ReLU layers to the Gaussian's mean and log-variance."""

    def __init__(self, latent_dim: int, channels: int, size: int, width: int = 512) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * size * size, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 2 * latent_dim),
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_var = self.body(x).chunk(2, 1)
        return mean, log_var.clamp(-10, 10)


ARCHITECTURES: dict[str, tuple[type[MLPDecoder] | type[ConvDecoder], type[nn.Module]]] = {
    "mlp": (MLPDecoder, MLPEncoder),
    "conv": (ConvDecoder, ConvEncoder),
}
"""The VAE's (decoder, encoder) by ``train_generator.py arch=``; the decoder's GENERATORS name is <arch>_decoder."""


def vae_loss(decoder: MLPDecoder | ConvDecoder, encoder: nn.Module, x: torch.Tensor, beta: float) -> torch.Tensor:
    """The negative evidence lower bound per image (one reparametrised sample), with the KL weighted by beta."""
    mean, log_var = encoder(x)
    z = mean + torch.randn_like(mean) * (0.5 * log_var).exp()
    reconstruction = F.binary_cross_entropy_with_logits(decoder.logits(z), x, reduction="sum")
    kl = -0.5 * torch.sum(1 + log_var - mean**2 - log_var.exp())
    return (reconstruction + beta * kl) / len(x)


def train_vae(
    images: torch.Tensor,
    arch: str,
    latent_dim: int,
    width: int,
    epochs: int,
    batch_size: int,
    lr: float,
    beta: float,
    seed: int,
) -> tuple[MLPDecoder | ConvDecoder, dict[str, float]]:
    """The decoder of a VAE trained on ``images`` (N, C, H, W) in [0, 1], and the training's metrics."""
    torch.manual_seed(seed)
    channels, size = images.shape[1], images.shape[2]
    decoder_class, encoder_class = ARCHITECTURES[arch]
    decoder, encoder = (
        decoder_class(latent_dim, channels, size, width),
        encoder_class(latent_dim, channels, size, width),
    )
    optimizer = torch.optim.Adam([*decoder.parameters(), *encoder.parameters()], lr=lr)
    order = torch.Generator().manual_seed(seed)
    start, loss_sum, batches = time.perf_counter(), 0.0, 0
    for epoch in range(epochs):
        loss_sum, batches = 0.0, 0
        for index in torch.randperm(len(images), generator=order).split(batch_size):
            loss = vae_loss(decoder, encoder, images[index], beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum, batches = loss_sum + loss.item(), batches + 1
        log.info(
            "epoch %d/%d: loss %.2f per image (%.0f s)",
            epoch + 1,
            epochs,
            loss_sum / batches,
            time.perf_counter() - start,
        )
    metrics = {
        "train_loss_last_epoch": round(loss_sum / max(batches, 1), 3),
        "train_time_s": round(time.perf_counter() - start),
    }
    decoder.eval()
    return decoder, metrics
