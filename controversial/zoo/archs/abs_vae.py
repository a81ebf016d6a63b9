"""Analysis by synthesis (Schott et al. 2019): one small VAE per class, classes scored by fit.

Class score = ``-(min_z ||x - G_y(z)||^2 + beta * ||z||^2 / 2)``. The inner minimisation starts
from the best of a few latents (the class encoder's guess and fixed prior samples; during
synthesis, the previous step's optimum) and takes gradient steps on z with x held fixed. The score
is then recomputed at the optimised z* with gradients flowing to the image only (envelope theorem:
at a minimum, dz*/dx contributes nothing to first order). The ten VAEs are evaluated together as
grouped matrix products, one group per class.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError
from controversial.zoo.protocol import require_autograd
from controversial.zoo.registry import register_arch

N_CLASSES = 10
LIKELIHOODS = ("gaussian", "bernoulli")


class GroupedLinear(nn.Module):
    """``G`` independent linear layers applied at once: (G, N, in) -> (G, N, out)."""

    def __init__(self, groups: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(groups, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(groups, 1, out_features).uniform_(-bound, bound))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, inputs, self.weight)


class _ExpELU(torch.autograd.Function):
    """ELU as ``max(x, 0) + e - 1`` with ``e = exp(min(x, 0))``, whose derivative is simply ``e``."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor) -> torch.Tensor:
        slope = inputs.clamp(max=0).exp()
        ctx.save_for_backward(slope)
        return inputs.clamp(min=0) + slope - 1

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        (slope,) = ctx.saved_tensors
        return grad_output * slope


class ELU(nn.Module):
    """``F.elu`` (alpha 1) to float rounding, without the slow ``expm1`` of torch's ELU on CPU.
    Synthesis spends much of its ABS time here."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return _ExpELU.apply(inputs)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(GroupedLinear(N_CLASSES, n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(ELU())
    return nn.Sequential(*layers)


class AnalysisBySynthesis(nn.Module):
    # Synthesis stays float32 (controversial.synthesis.engine): its logits are minus fit losses that differ
    # by little between classes, and bfloat16 autocast flipped the top class of 77% of 90 noise images
    # (input-gradient cosine 0.969), though it ran the step about 2x faster (docs/benchmarks.md).
    bfloat16_synthesis = False
    prior_samples: torch.Tensor

    def __init__(
        self,
        image_shape: tuple[int, int, int] = (1, 28, 28),
        latent_dim: int = 8,
        encoder_hidden: tuple[int, ...] = (256,),
        decoder_hidden: tuple[int, ...] = (256, 512),
        beta: float = 1.0,
        n_prior_samples: int = 32,
        inference_steps: int = 20,
        warm_start_steps: int = 2,
        inner_lr: float = 0.1,
        likelihood: str = "gaussian",
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.image_shape = tuple(image_shape)
        n_pixels = math.prod(image_shape)
        self.latent_dim = latent_dim
        self.beta = beta
        self.inference_steps = inference_steps
        self.warm_start_steps = warm_start_steps
        self.inner_lr = inner_lr
        self.encoder = _mlp([n_pixels, *encoder_hidden, 2 * latent_dim])
        if likelihood not in LIKELIHOODS:
            raise UserError(f"ABS likelihood must be one of {', '.join(LIKELIHOODS)}, got {likelihood!r}")
        self.likelihood = likelihood
        self.decoder = _mlp([latent_dim, *decoder_hidden, n_pixels])  # outputs pixel logits
        prior = torch.randn(n_prior_samples, latent_dim, generator=torch.Generator().manual_seed(seed))
        self.register_buffer("prior_samples", prior, persistent=False)
        self._warm_latents: torch.Tensor | None = None  # (10, batch, d): last optimum per element
        self._warm_pixel_logits: torch.Tensor | None = None  # (10, batch, D): the decoder's output there
        self._rows: torch.Tensor | None = None

    # --- the generative model -------------------------------------------------------------
    def encode(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every class's posterior for every image: (N,D) -> mean, log-variance (10,N,d)."""
        mean, log_var = self.encoder(flat.unsqueeze(0).expand(N_CLASSES, -1, -1)).chunk(2, dim=-1)
        return mean, log_var

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """(10,M,d) -> (10,M,D) images in [0,1]: class k's decoder applied to latents[k]."""
        return torch.sigmoid(self.decoder(latents))

    def reconstruction_error(self, flat: torch.Tensor, pixel_logits: torch.Tensor) -> torch.Tensor:
        """-log p(x|z) up to a constant, from the decoder's pixel logits at z: squared error
        (Gaussian) or cross-entropy (Bernoulli)."""
        if self.likelihood == "bernoulli":
            return F.binary_cross_entropy_with_logits(pixel_logits, flat.expand_as(pixel_logits), reduction="none").sum(
                -1
            )
        # mse_loss rather than (x - G(z)) ** 2: its fused backward is much faster on CPU
        return F.mse_loss(torch.sigmoid(pixel_logits), flat.expand_as(pixel_logits), reduction="none").sum(-1)

    def loss(self, flat: torch.Tensor, latents: torch.Tensor, pixel_logits: torch.Tensor | None = None) -> torch.Tensor:
        """Per-class fit loss: flat (N,D) or (10,N,D), latents (10,N,d) -> (10,N).

        ``pixel_logits`` (the decoder's output at ``latents``) may be passed to skip the decoder.
        """
        if pixel_logits is None:
            pixel_logits = self.decoder(latents)
        return self.reconstruction_error(flat, pixel_logits) + 0.5 * self.beta * (latents**2).sum(-1)

    # --- inference --------------------------------------------------------------------------
    def reset_state(self) -> None:
        """Forget warm-start latents; inference starts cold (the standard, accurate setting)."""
        self._warm_latents = None
        self._warm_pixel_logits = None
        self._rows = None

    def set_active_rows(self, rows: torch.Tensor) -> None:
        """Synthesis mode: the next batch holds elements ``rows`` of a fixed batch, so warm-start them."""
        self._rows = rows

    @torch.no_grad()
    def _cold_start(self, flat: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        """Best start per class and image among the encoder's guess and the fixed prior samples."""
        priors = self.prior_samples[None, :, None, :].expand(N_CLASSES, -1, len(flat), -1)
        pool = torch.cat([encoded.unsqueeze(1), priors], 1)  # (10, K, N, d)
        n_candidates = pool.shape[1]
        losses = self.loss(flat.repeat(n_candidates, 1), pool.reshape(N_CLASSES, -1, self.latent_dim))
        choice = losses.view(N_CLASSES, n_candidates, len(flat)).argmin(1)  # (10, N)
        index = choice[:, None, :, None].expand(-1, 1, -1, self.latent_dim)
        return pool.gather(1, index).squeeze(1)

    @torch.no_grad()
    def _warm_start(
        self,
        flat: torch.Tensor,
        encoded: torch.Tensor,
        rows: torch.Tensor,
        warm_latents: torch.Tensor,
        warm_pixel_logits: torch.Tensor,
    ) -> torch.Tensor:
        """The previous step's optimum, unless the encoder's guess now fits better.

        The previous optimum is scored from its cached decoder output, which saves a decoder pass.
        """
        previous = warm_latents[:, rows]
        previous_loss = self.loss(flat, previous, warm_pixel_logits[:, rows])
        better = (self.loss(flat, encoded) < previous_loss).unsqueeze(-1)
        return torch.where(better, encoded, previous)

    def optimise_latents(self, flat: torch.Tensor) -> torch.Tensor:
        """Approximate argmin_z of the loss for every class and image; x is held constant."""
        require_autograd("ABS optimises its latents")
        flat = flat.detach()
        with torch.no_grad():
            encoded = self.encode(flat)[0]
        # The two caches are set and cleared together, so the second is never None when the first is not.
        rows, warm_latents, warm_pixel_logits = self._rows, self._warm_latents, self._warm_pixel_logits
        if rows is not None and warm_latents is not None and warm_pixel_logits is not None:
            start = self._warm_start(flat, encoded, rows, warm_latents, warm_pixel_logits)
            steps = self.warm_start_steps
        else:
            start = self._cold_start(flat, encoded)
            steps = self.inference_steps
        latents = start.clone().requires_grad_(True)
        optimizer = torch.optim.Adam([latents], lr=self.inner_lr)
        with torch.enable_grad():
            for _ in range(steps):
                optimizer.zero_grad()
                self.loss(flat, latents).sum().backward()
                optimizer.step()
        return latents.detach()

    def _remember(self, rows: torch.Tensor, latents: torch.Tensor, pixel_logits: torch.Tensor) -> None:
        """Keep each active element's optimum (and its decoder output) for the next warm start."""
        size = int(rows.max()) + 1
        warm_latents, warm_pixel_logits = self._warm_latents, self._warm_pixel_logits
        if warm_latents is None or warm_pixel_logits is None or warm_latents.shape[1] < size:
            warm_latents = _grow(warm_latents, size, latents)
            warm_pixel_logits = _grow(warm_pixel_logits, size, pixel_logits)
        warm_latents[:, rows] = latents
        warm_pixel_logits[:, rows] = pixel_logits.detach()
        self._warm_latents, self._warm_pixel_logits = warm_latents, warm_pixel_logits

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        flat = images.reshape(len(images), -1)
        latents = self.optimise_latents(flat)
        pixel_logits = self.decoder(latents)
        if self._rows is not None:
            self._remember(self._rows, latents, pixel_logits)
        return -self.loss(flat, latents, pixel_logits).T

    # --- training ---------------------------------------------------------------------------
    def elbo_loss(self, class_batches: torch.Tensor) -> torch.Tensor:
        """Negative ELBO for a (10,B,D) batch, one class per group."""
        mean, log_var = self.encoder(class_batches).chunk(2, dim=-1)
        latents = mean + torch.randn_like(mean) * (0.5 * log_var).exp()
        recon = self.reconstruction_error(class_batches, self.decoder(latents))
        kl = 0.5 * (mean**2 + log_var.exp() - 1 - log_var).sum(-1)
        return (recon + self.beta * kl).mean()


def _grow(buffer: torch.Tensor | None, size: int, like: torch.Tensor) -> torch.Tensor:
    """A (10, size, width of ``like``) zero buffer holding ``buffer``'s rows, so a batch may address more elements."""
    grown = like.new_zeros(N_CLASSES, size, like.shape[-1])
    if buffer is not None:
        grown[:, : buffer.shape[1]] = buffer
    return grown


@register_arch("abs")
def analysis_by_synthesis(**kwargs) -> AnalysisBySynthesis:
    return AnalysisBySynthesis(**kwargs)
