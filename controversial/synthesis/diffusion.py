"""``synthesis.method=diffusion``: controversial stimuli sampled from an image prior by guided DDIM.

Each DDIM step (diffusers' ``DDIMScheduler``; ``eta`` > 0 draws part of its noise afresh) predicts the noise
``eps`` of the current sample ``x_t`` and from it the clean image ``x0 = (x_t - sqrt(1 - abar_t) eps) /
sqrt(abar_t)``. The pair's objective (the registered one, LSE by default, over both models' calibrated logits) is
evaluated on ``x0``, and its gradient steers the step: under ``guidance=clean`` (the default) ``x0`` moves by ``s``
times the gradient scaled to unit RMS while the step keeps its noise direction (manifold-preserving guidance, He et
al. 2024); under ``guidance=noise`` the gradient with respect to ``x_t`` (through the UNet) shifts the noise
estimate, ``eps - s sqrt(1 - abar_t) grad`` (Dhariwal & Nichol 2021 on the clean estimate, as in universal
guidance, Bansal et al. 2023), which on the bundled MNIST prior barely moved the objective (docs/synthesis.md).
With ``recurrence`` k > 1 each step is taken k times, re-noising ``x_{t-1}`` back to level t in between. Every cell
of a pair is one element of the batch; the start of an element is its own Gaussian noise (a retry: a new seed, so
new noise); the final sample is quantised to 8 bits and scored in float32 like gradient ascent's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from controversial.errors import UserError
from controversial.synthesis.diffusion_model import Prior, load_prior
from controversial.synthesis.engine import BatchResult, evaluate_objective, score_images
from controversial.synthesis.objectives import hard_score
from controversial.synthesis.options import (
    METHODS,
    OBJECTIVES,
    DiffusionOptions,
    MethodRun,
    Objective,
    SynthesisOptions,
)
from controversial.synthesis.parametrization import quantize
from controversial.synthesis.precision import model_logits
from controversial.zoo.protocol import SynthesisModel


@dataclass
class _Clock:
    """Seconds in the classifiers (forward and backward to the clean image) and in the prior (UNet forward and,
    for guidance, backward)."""

    model: float = 0.0
    prior: float = 0.0
    started: float = field(default_factory=time.perf_counter)


@METHODS.register("diffusion")
def guided_diffusion(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    initial_images: torch.Tensor,
    options: SynthesisOptions,
    run: MethodRun,
) -> BatchResult:
    """The registered method: the prior ``diffusion.model`` (checked against the dataset) sampled from the
    Gaussian starts ``initial_images``; the ``optimizer:`` group does not apply."""
    if options.ensemble == "round_robin" and run.groups is not None:
        raise UserError(
            "synthesis.ensemble=round_robin applies to synthesis.method=gradient; the diffusion sampler guides "
            "every step by every instance (synthesis.ensemble=joint)"
        )
    prior = load_prior(run.diffusion.model, run.dataset)
    prior.unet.to(initial_images.device)
    return sample_batch(
        models, targets, initial_images, options, run.diffusion, prior, run.seed, run.on_step, run.on_scores, run.groups
    )


def sample_batch(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    noise: torch.Tensor,
    options: SynthesisOptions,
    diffusion: DiffusionOptions,
    prior: Prior,
    seed: int = 0,
    on_step: Callable[[int, int], None] | None = None,
    on_scores: Callable[[int, torch.Tensor], None] | None = None,
    groups: Sequence[int] | None = None,
) -> BatchResult:
    """Sample every element from its noise ``x_T`` (N, C, H, W) with guidance scale ``diffusion.guidance_scale``.

    ``seed`` seeds the fresh noise of the recurrence's re-noising and of steps with ``eta`` > 0. ``on_step(step,
    n)`` and ``on_scores(step, hard)`` (the hard score of the clean estimates) report each DDIM step.
    """
    from diffusers import DDIMScheduler

    clock = _Clock()
    scheduler = DDIMScheduler.from_config(prior.scheduler_config)
    scheduler.set_timesteps(diffusion.sampling_steps)
    objective = OBJECTIVES.get(options.objective)
    generator = torch.Generator(noise.device).manual_seed(seed)
    for model in models:
        model.reset_state()
        model.set_active_rows(torch.arange(len(noise), device=noise.device))
    sample = noise * scheduler.init_noise_sigma
    for step, t in enumerate(scheduler.timesteps):
        for repeat in range(diffusion.recurrence):
            eps, shift, hard = _guided_noise(
                prior, models, sample, t, scheduler, targets, options, objective, diffusion, clock, groups
            )
            previous = scheduler.step(eps, t, sample, eta=diffusion.eta, generator=generator).prev_sample
            if shift is not None:  # guidance=clean: the clean estimate moved, the noise direction kept
                previous = previous + _abar_before(scheduler, int(t)).sqrt() * shift
            if repeat < diffusion.recurrence - 1:
                sample = _renoise(scheduler, previous, int(t), generator)
        sample = previous
        if on_scores is not None and hard is not None:
            on_scores(step + 1, hard.cpu())
        if on_step is not None:
            on_step(step + 1, len(sample))
    return _result(models, targets, options, sample, diffusion, clock, groups)


def _guided_noise(
    prior: Prior,
    models: Sequence[SynthesisModel],
    sample: torch.Tensor,
    t: torch.Tensor,
    scheduler,
    targets: torch.Tensor,
    options: SynthesisOptions,
    objective: Objective,
    diffusion: DiffusionOptions,
    clock: _Clock,
    groups: Sequence[int] | None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The UNet's noise estimate at ``x_t`` (under ``guidance=noise`` shifted by the objective's gradient on the
    clean estimate), the shift of the clean estimate under ``guidance=clean``, and the clean estimates' hard
    scores (None without guidance: the classifiers are not run)."""
    guided = diffusion.guidance_scale > 0
    started = time.perf_counter()
    x_t = sample.detach().requires_grad_(guided and diffusion.guidance == "noise")
    with torch.set_grad_enabled(guided):
        eps = prior.unet(x_t, t).sample
    clock.prior += time.perf_counter() - started
    if not guided:
        return eps, None, None
    abar = scheduler.alphas_cumprod[int(t)].to(sample.device)
    clean = (x_t - (1 - abar).sqrt() * eps) / abar.sqrt()
    started = time.perf_counter()
    images = clean.detach().clamp(-1, 1).add(1).div(2).requires_grad_(True)
    logits = model_logits(models, images)
    value = evaluate_objective(objective, logits, targets, options, groups)
    finite = torch.isfinite(value)
    (image_grad,) = torch.autograd.grad(value[finite].sum(), images)
    image_grad = image_grad * (clean.detach().abs() <= 1) / 2  # through the clamp and the map to [0, 1]
    clock.model += time.perf_counter() - started
    hard = hard_score([l.detach() for l in logits], targets, groups)
    if diffusion.guide_until is not None:  # controversial enough already: the prior alone takes this step
        image_grad = image_grad * (hard < diffusion.guide_until).view(-1, *[1] * (image_grad.dim() - 1))
    if diffusion.guidance == "clean":
        rms = image_grad.flatten(1).pow(2).mean(1).sqrt().clamp_min(1e-12).view(-1, 1, 1, 1)
        return eps.detach(), diffusion.guidance_scale * torch.nan_to_num(image_grad / rms), hard
    started = time.perf_counter()
    (grad,) = torch.autograd.grad(clean, x_t, image_grad)
    clock.prior += time.perf_counter() - started
    return eps.detach() - diffusion.guidance_scale * (1 - abar).sqrt() * torch.nan_to_num(grad), None, hard


def _renoise(scheduler, previous: torch.Tensor, t: int, generator: torch.Generator) -> torch.Tensor:
    """``x_{t-1}`` back to noise level t with fresh noise: ``sqrt(a) x_{t-1} + sqrt(1 - a) z``, ``a = abar_t /
    abar_{t-1}`` (universal guidance's recurrence)."""
    ratio = (scheduler.alphas_cumprod[t] / _abar_before(scheduler, t)).to(previous.device)
    fresh = torch.randn(previous.shape, generator=generator, device=previous.device)
    return ratio.sqrt() * previous + (1 - ratio).sqrt() * fresh


def _abar_before(scheduler, t: int) -> torch.Tensor:
    """abar of the noise level DDIM steps to from level t (1 after the last step)."""
    before = t - scheduler.config.num_train_timesteps // scheduler.num_inference_steps
    return scheduler.alphas_cumprod[before] if before >= 0 else scheduler.final_alpha_cumprod


def _result(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    options: SynthesisOptions,
    sample: torch.Tensor,
    diffusion: DiffusionOptions,
    clock: _Clock,
    groups: Sequence[int] | None,
) -> BatchResult:
    """The final samples in 8 bits, scored in float32 exactly as gradient ascent's results are."""
    final = quantize(sample.detach().div(2).add(0.5).clamp(0, 1))
    started = time.perf_counter()
    hard, value, probabilities = score_images(models, final, targets, options, groups)
    clock.model += time.perf_counter() - started
    n = len(final)
    failures = [
        "" if torch.isfinite(h) and torch.isfinite(v) else "non-finite score of the 8-bit image"
        for h, v in zip(hard, value)
    ]
    steps = diffusion.sampling_steps * diffusion.recurrence
    no = torch.zeros(n, dtype=torch.bool)
    return BatchResult(
        final,
        hard,
        value,
        probabilities,
        torch.full((n,), steps),
        no,
        no.clone(),
        failures,
        clock.model,
        time.perf_counter() - clock.started,
    )
