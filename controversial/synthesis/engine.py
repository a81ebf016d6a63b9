"""Batched synthesis of controversial stimuli.

Every cell (one target class per model, times seeds) of a model set is one element of a single
batch. Each element keeps its own convergence counter: once no pixel has moved by more than
``tolerance_levels`` 8-bit levels for more than ``patience`` consecutive steps, it is frozen and
dropped from the forward pass while the rest continue. The best image so far (by the objective) is
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
always computed in float32 on the 8-bit image (``precision.py``: which models, and their weights cast once).

Against ensembles of trained instances, each step runs every instance (``ensemble=joint``) or one instance per
model in turn (``round_robin``, ``ensembles.py``: the stop and stall rules and the best image then read the
lowest of each instance set's latest scores).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from controversial.errors import UserError
from controversial.synthesis.ensembles import StepMembers, step_schedule
from controversial.synthesis.objectives import hard_score, worst_case_probabilities
from controversial.synthesis.options import (
    METHODS,
    OBJECTIVES,
    MethodRun,
    Objective,
    OptimizerFactory,
    OptimizerOptions,
    SynthesisOptions,
)
from controversial.synthesis.parametrization import Parametrization, level_change, parametrization, quantize
from controversial.synthesis.precision import (
    LowPrecisionWeights,
    bfloat16_models,
    low_precision_weights,
    model_logits,
)
from controversial.synthesis.transforms import transform
from controversial.zoo.protocol import SynthesisModel, scoring

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    """Per-element outcome; ``probabilities[n, i, j]`` is model i's p(target j) on the 8-bit image (with
    ``groups``: its worst instance's, see ``objectives.worst_case_probabilities``)."""

    images: torch.Tensor
    hard: torch.Tensor
    smooth: torch.Tensor  # the objective on the 8-bit image (the paper's smooth score under the default, lse)
    probabilities: torch.Tensor
    steps: torch.Tensor
    converged: torch.Tensor
    stalled: torch.Tensor  # stopped by the stall rule (``stall_steps``)
    failures: list[str]  # "" when the element finished normally
    model_seconds: float
    total_seconds: float


@dataclass(frozen=True)
class Finished:
    """An element that left the batch before the end: its 8-bit image will not change any more, so a caller
    can keep it if the batch is interrupted (``on_finished``)."""

    image: torch.Tensor  # (C, H, W), the quantised best image, on the CPU
    steps: int
    converged: bool
    stalled: bool
    failure: str


def evaluate_objective(
    objective: Objective,
    logits: list[torch.Tensor],
    targets: torch.Tensor,
    options: SynthesisOptions,
    groups: Sequence[int] | None = None,
) -> torch.Tensor:
    """The objective's values; ``groups`` (ensembles of instances, see ``objectives.py``) is passed only when
    given, so an objective written for single checkpoints keeps working for them."""
    if groups is None:
        return objective(logits, targets, options)
    try:
        return objective(logits, targets, options, groups=groups)  # type: ignore[call-arg]
    except TypeError as error:
        if "groups" not in str(error):
            raise
        raise UserError(
            f"synthesis.objective={options.objective} takes no groups= argument, so it cannot synthesize against "
            "ensembles of instances; use objective=lse or one instance per model"
        ) from None


@scoring()
def score_images(
    models: Sequence[SynthesisModel],
    images: torch.Tensor,
    targets: torch.Tensor,
    options: SynthesisOptions,
    groups: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hard score, objective and the (N, m, m) target probabilities of fixed images, in float32 (autocast
    off, whatever the caller has on): the scores acceptance rests on. With ``groups`` each model's
    probabilities are its worst instance's (``worst_case_probabilities``)."""
    for model in models:
        model.reset_state()
    logits = model_logits(models, images)
    probabilities = torch.stack([torch.sigmoid(l.gather(1, targets)) for l in logits], 1)
    objective = OBJECTIVES.get(options.objective)
    value = evaluate_objective(objective, logits, targets, options, groups)
    return hard_score(logits, targets, groups), value, worst_case_probabilities(probabilities, groups)


@dataclass
class _Records:
    """What the batch keeps per element (indexed by batch row) from the first step to the result."""

    best_images: torch.Tensor
    best_value: torch.Tensor  # the best objective so far (-inf: none finite yet)
    steps: torch.Tensor
    converged: torch.Tensor
    stalled: torch.Tensor
    best_watched: torch.Tensor  # the stall rule's best watched score ...
    last_gain: torch.Tensor  # ... and the step at which it last rose by stall_gain
    failures: list[str]
    recent_value: torch.Tensor  # (N, steps in the ensemble's cycle): each step's objective and hard score, ...
    recent_hard: torch.Tensor  # ... -inf until that step of the cycle has run

    @classmethod
    def start(cls, images: torch.Tensor, cycle: int) -> _Records:
        n, device = len(images), images.device
        return cls(
            images,
            torch.full((n,), -torch.inf, device=device),
            torch.zeros(n, dtype=torch.long, device=device),
            torch.zeros(n, dtype=torch.bool, device=device),
            torch.zeros(n, dtype=torch.bool, device=device),
            torch.full((n,), -torch.inf, device=device),
            torch.zeros(n, dtype=torch.long, device=device),
            [""] * n,
            torch.full((n, cycle), -torch.inf, device=device),
            torch.full((n, cycle), -torch.inf, device=device),
        )

    def lowest_over_cycle(
        self, rows: torch.Tensor, phase: int, value: torch.Tensor, hard: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Record a step of a round-robin cycle; each element's lowest objective and hard score over the
        cycle's latest steps, so a rule reading them holds for every instance set, not only this step's."""
        self.recent_value[rows, phase] = value
        self.recent_hard[rows, phase] = hard
        return self.recent_value[rows].amin(1), self.recent_hard[rows].amin(1)


@dataclass
class _Active:
    """The optimisation state of the elements still running; ``rows`` maps them to the batch.

    It holds the active elements only, so a step costs what its live batch costs: ``params`` and the
    optimiser state are compacted as elements finish. With a per-element optimiser (Adam, SGD,
    RMSprop, ...) every element's update is the same as in a full batch, so results do not depend on
    which others are still running.
    """

    rows: torch.Tensor
    params: torch.Tensor
    optimizer: torch.optim.Optimizer
    previous: torch.Tensor  # the images after the last step, for the convergence rule
    quiet_steps: torch.Tensor

    def keep(self, keep: torch.Tensor, make_optimizer: OptimizerFactory) -> _Active:
        """The elements ``keep`` only."""
        params, optimizer = _compact(self.params, self.optimizer, make_optimizer, keep)
        return _Active(self.rows[keep], params, optimizer, self.previous[keep], self.quiet_steps[keep])


def _forward_backward(
    models: Sequence[SynthesisModel],
    images: torch.Tensor,
    targets: torch.Tensor,
    options: SynthesisOptions,
    objective: Objective,
    generator: torch.Generator,
    bfloat16: Sequence[bool],
    weights: Sequence[LowPrecisionWeights | None],
    members: StepMembers,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward and backward pass of one step through the instances ``members`` names: the objective
    (detached), the hard score, and which elements have a finite objective; the gradient of the summed finite
    objective is left in the parameters behind ``images``."""
    logits = model_logits(
        [models[i] for i in members.indices],
        transform(images, options, generator),
        [bfloat16[i] for i in members.indices],
        [weights[i] for i in members.indices],
    )
    value = evaluate_objective(objective, logits, targets, options, members.groups)
    hard = hard_score([l.detach() for l in logits], targets, members.groups)
    finite = torch.isfinite(value)
    value[finite].sum().neg().backward()
    return value.detach(), hard, finite


def _record_best(
    records: _Records, active: _Active, step: int, images: torch.Tensor, value: torch.Tensor, finite: torch.Tensor
) -> torch.Tensor:
    """Keep each element's best image so far; an element whose objective or gradient is not finite is
    marked failed and its gradient zeroed. Returns which elements were finite."""
    rows = active.rows
    grad = active.params.grad
    assert grad is not None  # backward() has filled it (zero_grad keeps it as zeros, never None)
    finite &= torch.isfinite(grad.flatten(1)).all(1)
    for index in rows[~finite].tolist():
        records.failures[index] = f"non-finite score or gradient at step {step}"
    improved = finite & (value > records.best_value[rows])
    records.best_value[rows[improved]] = value[improved]
    records.best_images[rows[improved]] = images.detach()[improved]
    grad[~finite] = 0
    return finite


def _converged(
    records: _Records, active: _Active, param: Parametrization, options: SynthesisOptions, finite: torch.Tensor
) -> torch.Tensor:
    """After the optimiser's step: count it, and which elements have now been quiet (no pixel moving more
    than ``tolerance_levels``) for more than ``patience`` steps."""
    records.steps[active.rows[finite]] += 1
    current = param.to_images(active.params)
    quiet = level_change(active.previous, current) <= options.tolerance_levels
    active.quiet_steps = torch.where(quiet, active.quiet_steps + 1, 0)
    active.previous = current
    newly_converged = active.quiet_steps > options.patience
    records.converged[active.rows[newly_converged]] = True
    return newly_converged


def _still_running(
    records: _Records,
    rows: torch.Tensor,
    step: int,
    options: SynthesisOptions,
    hard: torch.Tensor,
    value: torch.Tensor,
    finite: torch.Tensor,
    newly_converged: torch.Tensor,
) -> torch.Tensor:
    """Which elements go on: not converged, not at ``stop_score``, not stalled, not failed."""
    reached = hard >= options.stop_score if options.stop_score is not None else torch.zeros_like(finite)
    watched = hard if options.stall_on == "hard" else value
    gained = finite & (watched >= records.best_watched[rows] + options.stall_gain)
    records.best_watched[rows[gained]] = watched[gained]
    records.last_gain[rows[gained]] = step
    newly_stalled = torch.zeros_like(finite)
    if options.stall_steps is not None:
        newly_stalled = ~newly_converged & ~reached & (step - records.last_gain[rows] >= options.stall_steps)
        records.stalled[rows[newly_stalled]] = True
    return ~(newly_converged | reached | newly_stalled | ~finite)


def _report_finished(records: _Records, rows: torch.Tensor, on_finished: Callable[[int, Finished], None]) -> None:
    """Hand each element leaving the batch to ``on_finished`` with its final 8-bit image (it changes no more)."""
    for index in rows.tolist():
        image = quantize(records.best_images[index : index + 1])[0].cpu()
        finished = Finished(
            image,
            int(records.steps[index]),
            bool(records.converged[index]),
            bool(records.stalled[index]),
            records.failures[index],
        )
        on_finished(index, finished)


def synthesize_batch(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    initial_images: torch.Tensor,
    options: SynthesisOptions,
    seed: int = 0,
    on_step: Callable[[int, int], None] | None = None,
    on_scores: Callable[[int, torch.Tensor], None] | None = None,
    optimizer: OptimizerFactory | None = None,
    on_finished: Callable[[int, Finished], None] | None = None,
    groups: Sequence[int] | None = None,
) -> BatchResult:
    """Maximise the objective ``options.objective`` of every element at once.

    models: m calibrated models (their state hooks are called as ``zoo/protocol.py`` declares);
    targets: (N, m) target class of each model per element;
    initial_images: (N, C, H, W) in [0, 1]. ``on_step(step, n_active)`` reports progress;
    ``on_scores(step, hard)`` receives a CPU copy of the hard scores of the elements optimised in
    that step (for tracking; it costs a device sync per step, so pass it only when needed).
    ``optimizer(params)`` builds the optimiser (default: the paper's, ``OptimizerOptions()``).
    ``on_finished(index, finished)`` is called for each element as it leaves the batch early.
    ``groups``: the models are trained instances, ``groups[i]`` the model (target column) of instance i; every
    instance must see its model's target (``objectives.py``).
    """
    start_time = time.perf_counter()
    model_seconds = 0.0
    make_optimizer = optimizer or OptimizerOptions().factory()
    objective = OBJECTIVES.get(options.objective)
    channels, height, width = initial_images.shape[1:]
    param = parametrization(options, (channels, height, width))
    params = param.from_images(initial_images).requires_grad_(True)
    generator = torch.Generator().manual_seed(seed)
    for model in models:
        model.reset_state()
    schedule = step_schedule(len(models), groups, options.ensemble)
    records = _Records.start(param.to_images(params.detach()), len(schedule))
    rows = torch.arange(len(targets), device=initial_images.device)
    quiet_steps = torch.zeros(len(targets), dtype=torch.long, device=initial_images.device)
    active = _Active(rows, params, make_optimizer([params]), records.best_images.clone(), quiet_steps)
    bfloat16 = bfloat16_models(models, options.precision, initial_images.device)
    weights = [low_precision_weights(model) if low else None for model, low in zip(models, bfloat16)]

    for step in range(options.max_steps):
        if len(active.rows) == 0:
            break
        for model in models:
            model.set_active_rows(active.rows)
        active.optimizer.zero_grad(set_to_none=False)
        images = param.to_images(active.params)
        model_start = time.perf_counter()
        phase = step % len(schedule)
        value, hard, finite = _forward_backward(
            models, images, targets[active.rows], options, objective, generator, bfloat16, weights, schedule[phase]
        )
        model_seconds += time.perf_counter() - model_start
        with torch.no_grad():
            if len(schedule) > 1:
                value, hard = records.lowest_over_cycle(active.rows, phase, value, hard)
            finite = _record_best(records, active, step, images, value, finite)
            active.optimizer.step()
            newly_converged = _converged(records, active, param, options, finite)
            keep = _still_running(records, active.rows, step, options, hard, value, finite, newly_converged)
            if on_finished is not None and not bool(keep.all()):
                _report_finished(records, active.rows[~keep], on_finished)
            if not bool(keep.all()):
                active = active.keep(keep, make_optimizer)
        if on_scores is not None:
            on_scores(step + 1, hard.detach().cpu())
        if on_step is not None:
            on_step(step + 1, len(active.rows))
    return _result(models, targets, options, records, model_seconds, start_time, groups)


@METHODS.register("gradient")
def gradient_ascent(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    initial_images: torch.Tensor,
    options: SynthesisOptions,
    run: MethodRun,
) -> BatchResult:
    """``synthesis.method=gradient``, the paper's: :func:`synthesize_batch` with the ``optimizer:`` group."""
    return synthesize_batch(
        models,
        targets,
        initial_images,
        options,
        run.seed,
        run.on_step,
        run.on_scores,
        run.optimizer.factory(),
        run.on_finished,
        run.groups,
    )


def _result(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    options: SynthesisOptions,
    records: _Records,
    model_seconds: float,
    start_time: float,
    groups: Sequence[int] | None,
) -> BatchResult:
    """Score exactly the 8-bit images people will see, and name the elements that failed."""
    final = quantize(records.best_images)
    hard, value, probabilities = score_images(models, final, targets, options, groups)
    failures = records.failures
    for index in torch.nonzero(~torch.isfinite(hard) | ~torch.isfinite(value)).squeeze(1).tolist():
        failures[index] = failures[index] or "non-finite score of the 8-bit image"
    for index in torch.nonzero(torch.isinf(records.best_value)).squeeze(1).tolist():
        failures[index] = failures[index] or "no finite score during optimisation"
    return BatchResult(
        final,
        hard,
        value,
        probabilities,
        records.steps,
        records.converged,
        records.stalled,
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


def ordered_class_pairs(classes: int | Sequence[int] = 10) -> list[tuple[int, int]]:
    """All (a, b) with a != b among ``classes`` (a count K: 0..K-1, or the chosen class indices): the
    K x (K-1) cells of a model pair's matrix, 90 for ten classes."""
    indices = range(classes) if isinstance(classes, int) else classes
    return [(a, b) for a in indices for b in indices if a != b]


def noise_images(cells: Sequence[tuple[int, ...]], seeds: Sequence[int], shape: tuple[int, int, int]) -> torch.Tensor:
    """Uniform noise, one generator per (cell, seed): an element's start does not depend on its batch.

    A cell's generator key is its classes as digits (``a + 10 b``), as for every run of a 10-class dataset;
    a cell with a class index of 10 or more takes a key of its own from 100 on (base-1000 digits), so cells of
    datasets with up to 999 classes never share a start."""
    return torch.stack([torch.rand(shape, generator=_start_generator(c, s)) for c, s in zip(cells, seeds)])


def gaussian_noise(cells: Sequence[tuple[int, ...]], seeds: Sequence[int], shape: tuple[int, int, int]) -> torch.Tensor:
    """Standard normal noise (a diffusion sampler's start), one generator per (cell, seed) as in ``noise_images``."""
    return torch.stack([torch.randn(shape, generator=_start_generator(c, s)) for c, s in zip(cells, seeds)])


def _start_generator(cell: tuple[int, ...], seed: int) -> torch.Generator:
    if all(c < 10 for c in cell):
        offset = sum(c * 10**i for i, c in enumerate(cell))
    else:
        offset = 100 + sum(c * 1000**i for i, c in enumerate(cell))
    return torch.Generator().manual_seed(seed * 1_000_003 + offset)
