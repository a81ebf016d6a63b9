"""Batched synthesis of controversial stimuli.

Every cell (one target class per model, times seeds) of a model set is one element of a single
batch. Each element keeps its own convergence counter: once no pixel has moved by more than
``tolerance_levels`` 8-bit levels for more than ``patience`` consecutive steps, it is frozen and
dropped from the forward pass while the rest continue. The best image so far (by smooth score) is
kept per element; the final score is computed on exactly the 8-bit image people will see.

Optionally (``stop_score``), an element also stops once the hard score of its current image
reaches a level comfortably above the acceptance threshold: the paper's convergence rule rarely
fires within 1000 Adam steps, and this cuts synthesis time several-fold on a CPU. Set it to None
for the published procedure.

Optionally (``stall_steps``), an element also stops once its watched score (``stall_on``: the hard
score, or the smooth objective) has not risen by ``stall_gain`` above its best for that many steps:
a cell stuck in a poor local optimum is better retried from a new start (the task's next attempt)
than run on to ``max_steps``. The smooth score suits starts far from the data (noise), where the
hard score sits near zero for tens of steps while the objective is still climbing.

Optionally (``precision``), the models' forward and backward in the optimisation steps run under
bfloat16 autocast, each model only if its family allows it (``bfloat16_synthesis``); the image
parameters and the optimiser stay in float32, and the final scores, on which acceptance rests, are
always computed in float32 on the 8-bit image.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

import torch

from controversial.synthesis.objectives import hard_score, smooth_score
from controversial.synthesis.parametrization import ImageParametrization, jitter, level_change, quantize
from controversial.zoo.protocol import SynthesisModel, scoring

log = logging.getLogger(__name__)

OptimizerFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


def default_optimizer() -> OptimizerFactory:
    """The paper's optimiser: Adam, lr 0.05, betas (0.9, 0.999)."""
    return partial(torch.optim.Adam, lr=0.05, betas=(0.9, 0.999))


@dataclass
class SynthesisSettings:
    sharpness: float = 1.0  # LogSumExp sharpness of the smooth score (the paper's alpha)
    max_steps: int = 1000
    patience: int = 10  # converged after MORE than this many consecutive quiet steps
    tolerance_levels: float = 0.5  # a quiet step moves no pixel by more than this many 8-bit levels
    threshold: float = 0.75  # acceptance: hard score of the 8-bit image
    stop_score: float | None = 0.9  # freeze an element once its current hard score reaches this (None: never)
    stall_steps: int | None = None  # freeze an element whose watched score gains < stall_gain in this many steps
    stall_gain: float = 0.01
    stall_on: str = "hard"  # the watched score: hard (a probability) | smooth (the objective, in logit units)
    parametrization: str = "pixel"
    fourier_decay: float = 1.0
    jitter: int = 0
    precision: str = "fp32"  # fp32 | bf16 (bfloat16 autocast in the steps) | auto (bf16 where the device has it)
    optimizer: OptimizerFactory = field(default_factory=default_optimizer)


@dataclass
class BatchResult:
    """Per-element outcome; ``probabilities[n, i, j]`` is model i's p(target j) on the 8-bit image."""

    images: torch.Tensor
    hard: torch.Tensor
    smooth: torch.Tensor
    probabilities: torch.Tensor
    steps: torch.Tensor
    converged: torch.Tensor
    stalled: torch.Tensor  # stopped by the stall rule (``stall_steps``)
    failures: list[str]  # "" when the element finished normally
    model_seconds: float
    total_seconds: float


PRECISIONS = ("fp32", "bf16", "auto")


def bfloat16_native(device: torch.device) -> bool:
    """Whether ``device`` has bfloat16 arithmetic in hardware (a GPU that supports it, a CPU with
    AVX-512 BF16 or AMX); elsewhere oneDNN emulates it, slower than float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def bfloat16_models(models: Sequence[SynthesisModel], precision: str, device: torch.device) -> list[bool]:
    """Per model, whether its synthesis steps run under bfloat16 autocast: ``precision`` asks for it
    (``auto``: where the device has it natively) and the model's family does not declare
    ``bfloat16_synthesis = False`` (numerics measured to break)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    wanted = precision == "bf16" or (precision == "auto" and bfloat16_native(device))
    return [wanted and getattr(getattr(model, "net", model), "bfloat16_synthesis", True) for model in models]


def _model_logits(
    models: Sequence[SynthesisModel], images: torch.Tensor, bfloat16: Sequence[bool] | None = None
) -> list[torch.Tensor]:
    """Every model's logits, in float32; ``bfloat16[i]`` runs model i under bfloat16 autocast (None: none
    does, whatever autocast the caller has on)."""
    logits = []
    for model, low in zip(models, bfloat16 or [False] * len(models)):
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=low):
            logits.append(model(images).float())
    return logits


@scoring()
def score_images(
    models: Sequence[SynthesisModel], images: torch.Tensor, targets: torch.Tensor, sharpness: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hard score, smooth score and the (N, m, m) target probabilities of fixed images, in float32
    (autocast off, whatever the caller has on): the scores acceptance rests on."""
    for model in models:
        model.reset_state()
    logits = _model_logits(models, images)
    probabilities = torch.stack([torch.sigmoid(l.gather(1, targets)) for l in logits], 1)
    return hard_score(logits, targets), smooth_score(logits, targets, sharpness), probabilities


def synthesize_batch(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    initial_images: torch.Tensor,
    settings: SynthesisSettings,
    seed: int = 0,
    on_step: Callable[[int, int], None] | None = None,
    on_scores: Callable[[int, torch.Tensor], None] | None = None,
) -> BatchResult:
    """Maximise the smooth controversiality of every element at once.

    models: m calibrated models (their state hooks are called as ``zoo/protocol.py`` declares);
    targets: (N, m) target class of each model per element;
    initial_images: (N, C, H, W) in [0, 1]. ``on_step(step, n_active)`` reports progress;
    ``on_scores(step, hard)`` receives a CPU copy of the hard scores of the elements optimised in
    that step (for tracking; it costs a device sync per step, so pass it only when needed).
    """
    n = len(targets)
    start_time = time.perf_counter()
    model_seconds = 0.0
    param = ImageParametrization(settings.parametrization, tuple(initial_images.shape[1:]), settings.fourier_decay)
    params = param.from_images(initial_images).requires_grad_(True)
    optimizer = settings.optimizer([params])
    generator = torch.Generator().manual_seed(seed)
    for model in models:
        model.reset_state()

    device = initial_images.device
    best_images = param.to_images(params.detach())
    best_smooth = torch.full((n,), -torch.inf, device=device)
    steps = torch.zeros(n, dtype=torch.long, device=device)
    converged = torch.zeros(n, dtype=torch.bool, device=device)
    stalled = torch.zeros(n, dtype=torch.bool, device=device)
    if settings.stall_on not in ("hard", "smooth"):
        raise ValueError(f"stall_on must be 'hard' or 'smooth', got {settings.stall_on!r}")
    best_watched = torch.full((n,), -torch.inf, device=device)
    last_gain = torch.zeros(n, dtype=torch.long, device=device)  # step at which best_watched last rose by stall_gain
    failures = [""] * n
    # The optimisation state holds the active elements only, so a step costs what its live batch
    # costs: ``rows`` maps them to the batch, ``params`` and the optimiser state are compacted as
    # elements finish. With a per-element optimiser (Adam, SGD, RMSprop, ...) every element's update
    # is the same as in a full batch, so results do not depend on which others are still running.
    rows = torch.arange(n, device=device)
    bfloat16 = bfloat16_models(models, settings.precision, device)
    previous = best_images.clone()
    quiet_steps = torch.zeros(n, dtype=torch.long, device=device)

    for step in range(settings.max_steps):
        if len(rows) == 0:
            break
        for model in models:
            model.set_active_rows(rows)
        optimizer.zero_grad(set_to_none=False)
        images = param.to_images(params)
        model_start = time.perf_counter()
        logits = _model_logits(models, jitter(images, settings.jitter, generator), bfloat16)
        objective = smooth_score(logits, targets[rows], settings.sharpness)
        current_hard = hard_score([l.detach() for l in logits], targets[rows])
        finite = torch.isfinite(objective)
        objective[finite].sum().neg().backward()
        model_seconds += time.perf_counter() - model_start

        with torch.no_grad():
            finite &= torch.isfinite(params.grad.flatten(1)).all(1)
            for index in rows[~finite].tolist():
                failures[index] = f"non-finite score or gradient at step {step}"
            improved = finite & (objective.detach() > best_smooth[rows])
            best_smooth[rows[improved]] = objective.detach()[improved]
            best_images[rows[improved]] = images.detach()[improved]
            params.grad[~finite] = 0
            optimizer.step()

            steps[rows[finite]] += 1
            current = param.to_images(params)
            quiet_steps = torch.where(level_change(previous, current) <= settings.tolerance_levels, quiet_steps + 1, 0)
            previous = current
            newly_converged = quiet_steps > settings.patience
            converged[rows[newly_converged]] = True
            reached = (
                current_hard >= settings.stop_score if settings.stop_score is not None else torch.zeros_like(finite)
            )
            watched = current_hard if settings.stall_on == "hard" else objective.detach()
            gained = finite & (watched >= best_watched[rows] + settings.stall_gain)
            best_watched[rows[gained]] = watched[gained]
            last_gain[rows[gained]] = step
            newly_stalled = torch.zeros_like(finite)
            if settings.stall_steps is not None:
                newly_stalled = ~newly_converged & ~reached & (step - last_gain[rows] >= settings.stall_steps)
                stalled[rows[newly_stalled]] = True
            keep = ~(newly_converged | reached | newly_stalled | ~finite)
            if not bool(keep.all()):
                rows, previous, quiet_steps = rows[keep], previous[keep], quiet_steps[keep]
                params, optimizer = _compact(params, optimizer, settings.optimizer, keep)
        if on_scores is not None:
            on_scores(step + 1, current_hard.detach().cpu())
        if on_step is not None:
            on_step(step + 1, len(rows))

    final = quantize(best_images)
    hard, smooth, probabilities = score_images(models, final, targets, settings.sharpness)
    for index in torch.nonzero(~torch.isfinite(hard) | ~torch.isfinite(smooth)).squeeze(1).tolist():
        failures[index] = failures[index] or "non-finite score of the 8-bit image"
    never_finite = torch.isinf(best_smooth)
    for index in torch.nonzero(never_finite).squeeze(1).tolist():
        failures[index] = failures[index] or "no finite score during optimisation"
    return BatchResult(
        final,
        hard,
        smooth,
        probabilities,
        steps,
        converged,
        stalled,
        failures,
        model_seconds,
        time.perf_counter() - start_time,
    )


def _compact(
    params: torch.Tensor, optimizer: torch.optim.Optimizer, make_optimizer: OptimizerFactory, keep: torch.Tensor
) -> tuple[torch.Tensor, torch.optim.Optimizer]:
    """The rows ``keep`` of the parameters, with a fresh optimiser carrying those rows of its state.

    State with one entry per row (Adam's moments, Adafactor's row and column factors) is sliced;
    anything else (a step count shared by every row) is carried over as is.
    """
    kept = params.detach()[keep].requires_grad_(True)
    compacted = make_optimizer([kept])
    compacted.state[kept] = {
        key: value[keep] if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == len(keep) else value
        for key, value in optimizer.state[params].items()
    }
    return kept, compacted


def ordered_class_pairs(n_classes: int = 10) -> list[tuple[int, int]]:
    """All (a, b) with a != b: the 90 cells of a model pair's matrix."""
    return [(a, b) for a in range(n_classes) for b in range(n_classes) if a != b]


def distinct_target_tuples(n_models: int, n_classes: int = 10) -> list[tuple[int, ...]]:
    """For more than two models: every assignment of distinct target classes."""
    return list(itertools.permutations(range(n_classes), n_models))


def noise_images(cells: Sequence[tuple[int, ...]], seeds: Sequence[int], shape: tuple[int, int, int]) -> torch.Tensor:
    """Uniform noise, one generator per (cell, seed): an element's start does not depend on its batch."""
    images = []
    for cell, seed in zip(cells, seeds):
        key = seed * 1_000_003 + sum(c * 10**i for i, c in enumerate(cell))
        images.append(torch.rand(shape, generator=torch.Generator().manual_seed(key)))
    return torch.stack(images)
