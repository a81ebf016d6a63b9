"""The fast CIFAR-10 recipe shared by the CIFAR-10 zoo, so that every model trains on a 2-core CPU in minutes.

Modelled on the fastest public CIFAR-10 training work (Page's "How to train your ResNet", hlb-CIFAR10,
airbench): whole-batch augmentation (per-image flips and small translations, done as one indexing
operation), label smoothing, Nesterov SGD with a triangular schedule (linear warm-up to the peak, then
linear decay to zero), an exponential moving average of the weights whose batch-norm statistics are
re-estimated at the end, and no weight decay on batch-norm and bias parameters. On a CPU two more
things pay: bfloat16 autocast (oneDNN's AVX-512 BF16 kernels, about 2x per step here) and
channels-last activations. The optimiser, schedule, EMA and loss are timm's.

The loop runs on whatever device the network is on (``python train.py ... device=cuda``): the
training set stays in CPU memory and every random draw (order, flips, shifts, attack starts) comes
from one CPU generator, so a GPU run makes the same draws as a CPU run, only faster.

The same loop trains adversarially (``adversarial`` settings): single-step attacks with a random
start (N-FGSM, de Jorge et al. 2022, or FGSM-RS, Wong et al. 2020) instead of multi-step PGD, with
a PGD check after every epoch that guards against catastrophic overfitting.

State is saved after every epoch (weights, EMA, optimiser, schedule, generators, the guard's best
epoch), so a run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import PolyLRScheduler
from timm.utils import ModelEmaV3
from torch import nn
from torch.optim.swa_utils import update_bn

from controversial.errors import UserError
from controversial.zoo.attacks import NORMS, ball_start, module_device, per_image_norm, pgd_accuracy, project
from controversial.zoo.energy_training import (
    EnergySettings,
    class_gaussian_sampler,
    contrastive_energy,
    freeze_batch_norm,
    uniform_sampler,
)
from controversial.zoo.resume import ResumeFile, TrainingProgress, load_training_state, save_training_state
from controversial.zoo.train_options import AUGMENTATIONS, TRAINING_METHODS, TrainOptions
from controversial.zoo.training import TrainingMethod

Progress = Callable[[str], None]
Monitor = Callable[[nn.Module], str]
ATTACKS = ("n_fgsm", "fgsm_rs")


@dataclass(frozen=True)
class AdversarialSettings:
    """Single-step adversarial training and the per-epoch guard against catastrophic overfitting.

    ``n_fgsm``: start at x + U(-noise_factor eps, noise_factor eps) (l-inf; an l2 ball of that radius
    for l2), take one step of ``step_factor * eps`` along the gradient's sign (l-inf) or direction (l2),
    and clip only to the image range, as de Jorge et al. do. ``fgsm_rs``: start uniformly in the eps
    ball, step, and project back onto the ball (Wong et al.). ``eps`` ramps up linearly over
    ``warmup_epochs``. After each epoch, ``guard_steps``-step PGD on a fixed slice of ``guard_images``
    training images: if its accuracy falls more than ``guard_drop`` below the best epoch's, training
    stops and the best epoch's weights are kept.
    """

    norm: str
    eps: float
    attack: str = "n_fgsm"
    step_factor: float = 1.0
    noise_factor: float = 2.0
    warmup_epochs: float = 0.0
    guard_steps: int = 10
    guard_images: int = 512
    guard_drop: float = 0.2
    eval_steps: int = 20  # the card's attack: PGD-eval_steps of eval_step_size on eval_images evenly spaced images
    eval_step_size: float | None = None  # default 2.5 eps / eval_steps
    eval_images: int = 1000

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise UserError(f"adversarial.norm '{self.norm}' unknown; allowed: {', '.join(NORMS)}")
        if self.attack not in ATTACKS:
            raise UserError(f"adversarial.attack '{self.attack}' unknown; allowed: {', '.join(ATTACKS)}")
        if self.eps <= 0:
            raise UserError(f"adversarial.eps must be > 0, got {self.eps}")


@dataclass(frozen=True)
class FastRecipe:
    """The recipe's settings (a model YAML's ``train.extra``); unknown keys are refused, so a typo is an error."""

    label_smoothing: float = 0.2
    momentum: float = 0.9
    warmup_fraction: float = 0.2  # share of all steps spent rising linearly to the peak lr
    ema_decay: float = 0.998
    bn_momentum: float = 0.1
    bn_refresh_batches: int = 50  # batches of training images that re-estimate the EMA model's BN statistics
    bfloat16: bool = True
    channels_last: bool = True
    adversarial: AdversarialSettings | None = None
    energy: EnergySettings | None = None

    @classmethod
    def from_extra(cls, extra: dict[str, Any]) -> FastRecipe:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(extra) - known - {"monitor_images"})
        if unknown:
            raise UserError(
                f"model.train.extra has unknown key(s) {unknown} for the fast recipe; allowed: {sorted(known)}"
            )
        values = {k: v for k, v in extra.items() if k in known}
        for key, schema in (("adversarial", AdversarialSettings), ("energy", EnergySettings)):
            if values.get(key) is not None:
                given = dict(values[key])
                allowed = {f.name for f in fields(schema)}
                if set(given) - allowed:
                    raise UserError(
                        f"model.train.extra.{key} has unknown key(s) {sorted(set(given) - allowed)};"
                        f" allowed: {sorted(allowed)}"
                    )
                values[key] = schema(**given)
        if values.get("adversarial") is not None and values.get("energy") is not None:
            raise UserError("model.train.extra: adversarial and energy cannot be combined")
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@AUGMENTATIONS.register("crop_flip")
def batch_augment(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Per image: a random horizontal flip and a translation of up to ``max_shift`` pixels (zero fill), one gather."""
    n, channels, height, width = images.shape
    padded = F.pad(images, (max_shift,) * 4)
    offsets = torch.randint(0, 2 * max_shift + 1, (n, 2), generator=generator)
    flips = torch.rand(n, generator=generator) < 0.5
    rows = offsets[:, :1] + torch.arange(height)
    columns = offsets[:, 1:] + torch.arange(width)
    columns = torch.where(flips[:, None], columns.flip(1), columns)
    return padded[
        torch.arange(n)[:, None, None, None],
        torch.arange(channels)[None, :, None, None],
        rows[:, None, :, None],
        columns[:, None, None, :],
    ]


def single_step_attack(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: AdversarialSettings,
    eps: float,
    generator: torch.Generator,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> torch.Tensor:
    """One N-FGSM or FGSM-RS step from a random start (see ``AdversarialSettings``); returns detached images."""
    radius = eps * (settings.noise_factor if settings.attack == "n_fgsm" else 1.0)
    start = ball_start(images, settings.norm, radius, generator)
    delta = (images + start).clamp(0, 1) - images
    delta.requires_grad_(True)
    with autocast():
        loss = F.cross_entropy(net(images + delta), labels)
    (grad,) = torch.autograd.grad(loss, delta)
    grad = grad.float()
    step = grad.sign() if settings.norm == "linf" else grad / per_image_norm(grad)
    delta = delta.detach() + settings.step_factor * eps * step
    if settings.attack == "fgsm_rs":
        delta = project(delta, settings.norm, eps)
    return (images + delta).clamp(0, 1).detach()


def _set_bn_momentum(net: nn.Module, momentum: float) -> None:
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = momentum


def _has_batch_norm(net: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())


@dataclass
class _Run:
    """What a fast training run carries from epoch to epoch (``method_state`` is saved with it to resume)."""

    net: nn.Module
    settings: TrainOptions
    recipe: FastRecipe
    device: torch.device
    generator: torch.Generator
    memory_format: torch.memory_format
    optimizer: torch.optim.Optimizer
    scheduler: PolyLRScheduler
    ema: ModelEmaV3
    criterion: nn.Module
    steps_per_epoch: int
    guard_x: torch.Tensor  # the fixed training slice of the guard against catastrophic overfitting
    guard_y: torch.Tensor
    method_state: dict[str, torch.Tensor]
    fresh_starts: Callable[[int, torch.Generator], torch.Tensor]  # the energy term's new chains

    def autocast(self) -> contextlib.AbstractContextManager:
        bfloat16 = self.recipe.bfloat16
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()


def _start(
    net: nn.Module, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions, recipe: FastRecipe
) -> _Run:
    """The seeded generators, optimiser, schedule, EMA and loss, and the state of the guard and the energy term."""
    device = module_device(net)
    generator = torch.Generator().manual_seed(settings.seed)
    torch.manual_seed(settings.seed)
    memory_format = torch.channels_last if recipe.channels_last else torch.contiguous_format
    net.to(memory_format=memory_format)
    _set_bn_momentum(net, recipe.bn_momentum)
    optimizer = create_optimizer_v2(
        net, opt="sgd", lr=settings.lr, weight_decay=settings.weight_decay, momentum=recipe.momentum
    )  # timm's "sgd" is Nesterov; no decay on BN and biases
    steps_per_epoch = len(images) // settings.batch_size  # the last partial batch is dropped
    total_steps = settings.epochs * steps_per_epoch
    warmup_steps = round(recipe.warmup_fraction * total_steps)
    scheduler = PolyLRScheduler(
        optimizer,
        t_initial=total_steps - warmup_steps,
        power=1.0,
        warmup_t=warmup_steps,
        warmup_lr_init=settings.lr * 0.02,
        warmup_prefix=True,
        t_in_epochs=False,
    )
    ema = ModelEmaV3(net, decay=recipe.ema_decay, use_warmup=True)
    criterion = LabelSmoothingCrossEntropy(recipe.label_smoothing)
    adversarial = recipe.adversarial
    n_guard = adversarial.guard_images if adversarial else 0
    guard_slice = torch.randperm(len(images), generator=torch.Generator().manual_seed(settings.seed + 7))[:n_guard]
    # The guard's memory: best PGD accuracy so far (-1: none yet), and the EMA weights of that epoch.
    guard_best = torch.tensor([-1.0, 0.0])  # [accuracy, epoch]
    best_weights = {f"best/{k}": v.detach().clone() for k, v in ema.module.state_dict().items()} if adversarial else {}
    method_state = {
        "guard_best": guard_best,
        **{f"ema/{k}": v for k, v in ema.module.state_dict().items()},
        **best_weights,
    }
    fresh_starts = uniform_sampler(tuple(images.shape[1:]))  # the energy term's new chains (unused without it)
    if recipe.energy is not None:
        if recipe.energy.buffer_init == "class_gaussian":
            fresh_starts = class_gaussian_sampler(images, labels)
        buffer = fresh_starts(recipe.energy.buffer_size, torch.Generator().manual_seed(settings.seed + 13))
        method_state["replay_buffer"] = buffer  # part of the resume state: a resumed run samples the same
    return _Run(
        net,
        settings,
        recipe,
        device,
        generator,
        memory_format,
        optimizer,
        scheduler,
        ema,
        criterion,
        steps_per_epoch,
        images[guard_slice],
        labels[guard_slice],
        method_state,
        fresh_starts,
    )


def _train_epoch(run: _Run, images: torch.Tensor, labels: torch.Tensor, epoch: int) -> str:
    """One pass over the shuffled training set; returns the epoch's progress line (loss, accuracy, energy gap)."""
    net, settings, adversarial, energy = run.net, run.settings, run.recipe.adversarial, run.recipe.energy
    net.train()
    # The energy term's settings once its phase has begun (None before, or without one).
    phase_energy = energy if energy is not None and epoch >= energy.start_epoch else None
    if phase_energy is not None:
        freeze_batch_norm(net)
    order = torch.randperm(len(images), generator=run.generator)
    sums = {"loss": 0.0, "accuracy": 0.0, "energy_gap": 0.0}
    steps_per_epoch = run.steps_per_epoch
    for step in range(steps_per_epoch):
        batch = order[step * settings.batch_size : (step + 1) * settings.batch_size]
        x = batch_augment(images[batch], settings.max_shift, run.generator)
        x = x.to(run.device, non_blocking=True).contiguous(memory_format=run.memory_format)
        y = labels[batch].to(run.device, non_blocking=True)
        if adversarial:
            done = (epoch * steps_per_epoch + step) / max(1.0, adversarial.warmup_epochs * steps_per_epoch)
            eps = adversarial.eps * min(1.0, done) if adversarial.warmup_epochs > 0 else adversarial.eps
            x = single_step_attack(net, x, y, adversarial, eps, run.generator, run.autocast)
        with run.autocast():
            logits = net(x)
        loss = run.criterion(logits.float(), y)
        if phase_energy is not None:
            buffer = run.method_state["replay_buffer"]
            energy_loss, gap = contrastive_energy(
                net, logits, buffer, phase_energy, run.fresh_starts, run.generator, run.autocast, run.memory_format
            )
            loss = loss + energy_loss
            sums["energy_gap"] += gap
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"training diverged in epoch {epoch + 1}, step {step + 1} (non-finite loss); the resume file "
                "holds the last finished epoch: resume from it with a lower lr (or, with energy, a lower "
                "max_grad_norm or a higher energy_l2)"
            )
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if phase_energy is not None and phase_energy.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(net.parameters(), phase_energy.max_grad_norm)
        run.optimizer.step()
        global_step = epoch * steps_per_epoch + step + 1
        run.scheduler.step_update(global_step)
        run.ema.update(net, step=global_step)
        sums["loss"] += loss.item()
        sums["accuracy"] += float((logits.argmax(1) == y).float().mean())
    mean_gap = sums["energy_gap"] / steps_per_epoch
    energy_text = f", energy gap E(data) - E(samples) {mean_gap:.3f}" if phase_energy is not None else ""
    return (
        f"epoch {epoch + 1}/{settings.epochs}: train loss {sums['loss'] / steps_per_epoch:.4f}, "
        f"train accuracy {100 * sums['accuracy'] / steps_per_epoch:.1f}%"
        f"{' (adversarial)' if adversarial else ''}"
        f"{energy_text}"
    )


def _guard(run: _Run, adversarial: AdversarialSettings, epoch: int) -> tuple[str, bool]:
    """The PGD check after an adversarial epoch: keeps the best epoch's EMA weights, and stops training (True)
    when the accuracy fell more than ``guard_drop`` below the best; returns the text for the progress line."""
    guard_best, model = run.method_state["guard_best"], run.ema.module
    steps, eps = adversarial.guard_steps, adversarial.eps
    accuracy = pgd_accuracy(
        model, run.guard_x, run.guard_y, adversarial.norm, eps, steps, 2.5 * eps / steps, seed=run.settings.seed
    )
    line = f", guard PGD-{steps} accuracy {100 * accuracy:.1f}% (training slice)"
    if accuracy > guard_best[0]:
        guard_best.copy_(torch.tensor([accuracy, epoch + 1.0]))
        for k, v in model.state_dict().items():
            run.method_state[f"best/{k}"].copy_(v)
    elif accuracy < guard_best[0] - adversarial.guard_drop:
        line += (
            f": catastrophic overfitting (best {100 * guard_best[0]:.1f}% after epoch {int(guard_best[1])});"
            " stopping and keeping that epoch's weights"
        )
        return line, True
    return line, False


def _keep_final_weights(run: _Run, images: torch.Tensor, progress: Progress) -> None:
    """Load into the net the EMA weights (the guard's best epoch's, if adversarial), with refreshed BN statistics."""
    final, recipe, settings, guard_best = run.ema.module, run.recipe, run.settings, run.method_state["guard_best"]
    if recipe.adversarial and guard_best[0] >= 0:
        final.load_state_dict({k: run.method_state[f"best/{k}"] for k in final.state_dict()})
        progress(f"kept the weights of epoch {int(guard_best[1])} (guard PGD accuracy {100 * guard_best[0]:.1f}%)")
    if _has_batch_norm(final) and recipe.bn_refresh_batches > 0:
        refresh = torch.randperm(len(images), generator=torch.Generator().manual_seed(settings.seed + 11))
        refresh = refresh[: recipe.bn_refresh_batches * settings.batch_size].split(settings.batch_size)
        loader = [images[b].to(run.device).contiguous(memory_format=run.memory_format) for b in refresh]
        update_bn(loader, final)  # the EMA's averaged running statistics need not fit the averaged weights
    run.net.load_state_dict(final.state_dict())
    run.net.to(memory_format=torch.contiguous_format)
    run.net.eval()


def train_fast(
    net: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    settings: TrainOptions,
    progress: Progress,
    resume: ResumeFile | None = None,
    monitor: Monitor | None = None,
) -> None:
    """Train ``net`` in place with the fast recipe; on return it holds the EMA weights, in eval mode.

    ``settings`` is a ``TrainOptions`` (epochs, batch_size, lr = the peak lr, weight_decay, seed,
    max_shift) whose ``extra`` is a ``FastRecipe``. ``monitor(net)`` is called on the EMA model after
    every epoch for the progress line only (it never steers training).
    """
    recipe = FastRecipe.from_extra(settings.extra)
    joint_model = None
    if recipe.energy is not None:
        classifier = getattr(net, "classifier", None)
        if not isinstance(classifier, nn.Module):
            raise UserError(
                "model.train.extra.energy trains a joint energy model (arch jem); "
                f"{type(net).__name__} has no classifier"
            )
        joint_model, net = net, classifier  # the classifier is trained; the JEM-20 readout is only its use
    run = _start(net, images, labels, settings, recipe)
    saved = TrainingProgress(0, 0.0)
    if resume is not None and resume.path.is_file():
        saved = load_training_state(resume, net, run.optimizer, run.scheduler, run.generator, run.method_state)
        progress(f"resumed from {resume.path}: {saved.epochs_done}/{settings.epochs} epochs already done")
    session_start = time.perf_counter()
    for epoch in range(saved.epochs_done, settings.epochs):
        epoch_start = time.perf_counter()
        line = _train_epoch(run, images, labels, epoch) + f", {time.perf_counter() - epoch_start:.0f} s"
        run.ema.module.eval()
        stopped_early = False
        if recipe.adversarial:
            guard_line, stopped_early = _guard(run, recipe.adversarial, epoch)
            line += guard_line
        if monitor is not None:
            line += f", {monitor(run.ema.module)}"
        if resume is not None:
            seconds = saved.train_seconds + time.perf_counter() - session_start
            done_epochs = settings.epochs if stopped_early else epoch + 1
            save_training_state(
                resume,
                TrainingProgress(done_epochs, seconds),
                net,
                run.optimizer,
                run.scheduler,
                run.generator,
                run.method_state,
            )
        progress(line)
        if stopped_early:
            break
    _keep_final_weights(run, images, progress)
    if joint_model is not None:
        joint_model.eval()


TRAINING_METHODS.add(
    "fast", TrainingMethod(train_fast, resumable=True, extra=FastRecipe, monitored=True, any_device=True)
)
