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

from controversial.zoo.archs.jem import energy_of_logits, langevin
from controversial.zoo.attacks import NORMS, ball_start, module_device, per_image_norm, pgd_accuracy, project
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
            raise ValueError(f"adversarial.norm '{self.norm}' unknown; allowed: {', '.join(NORMS)}")
        if self.attack not in ATTACKS:
            raise ValueError(f"adversarial.attack '{self.attack}' unknown; allowed: {', '.join(ATTACKS)}")
        if self.eps <= 0:
            raise ValueError(f"adversarial.eps must be > 0, got {self.eps}")


ENERGY_STARTS = ("uniform", "class_gaussian")


@dataclass(frozen=True)
class EnergySettings:
    """JEM's generative term (Grathwohl et al. 2020) on top of the recipe's cross-entropy.

    From epoch ``start_epoch`` on (the epochs before are a cross-entropy warm start), each batch adds
    ``weight * (E(data) - E(samples))`` with ``E(x) = -logsumexp f(x)``: the samples come from
    ``sgld_steps`` Langevin steps ``x <- clamp(x - step_size dE/dx + N(0, noise^2), 0, 1)`` started
    from a persistent replay buffer of ``buffer_size`` images, each start replaced by a fresh one with
    probability ``reinit_prob``. Fresh starts are uniform noise or, with ``class_gaussian``, draws from
    per-class Gaussians fitted to the training images (JEM++), which keeps short chains near the data.
    ``energy_l2`` penalises the squared energies of data and samples, which keeps their scale in check
    (it costs the classifier nothing: a common shift of all logits moves the energy, not the softmax).
    ``max_grad_norm`` clips the gradient in these epochs: samples that are easy to tell from the data
    give the energy term gradient spikes (norms of 20-200 on a warm-started WRN-16-1), and without
    clipping every pilot diverged to NaN within three steps.
    In this phase every batch norm uses its running statistics, frozen at the warm start's values, so
    an image's energy never depends on the rest of its batch (samples and data alike).
    """

    start_epoch: int = 0
    sgld_steps: int = 5
    step_size: float = 0.25
    noise: float = 0.005
    buffer_size: int = 10000
    reinit_prob: float = 0.05
    buffer_init: str = "class_gaussian"
    weight: float = 1.0
    energy_l2: float = 0.0
    max_grad_norm: float | None = 1.0

    def __post_init__(self) -> None:
        if self.buffer_init not in ENERGY_STARTS:
            raise ValueError(f"energy.buffer_init '{self.buffer_init}' unknown; allowed: {', '.join(ENERGY_STARTS)}")
        if self.sgld_steps < 1 or self.buffer_size < 1:
            raise ValueError("energy.sgld_steps and energy.buffer_size must be >= 1")


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
            raise ValueError(
                f"model.train.extra has unknown key(s) {unknown} for the fast recipe; allowed: {sorted(known)}"
            )
        values = {k: v for k, v in extra.items() if k in known}
        for key, schema in (("adversarial", AdversarialSettings), ("energy", EnergySettings)):
            if values.get(key) is not None:
                given = dict(values[key])
                allowed = {f.name for f in fields(schema)}
                if set(given) - allowed:
                    raise ValueError(
                        f"model.train.extra.{key} has unknown key(s) {sorted(set(given) - allowed)};"
                        f" allowed: {sorted(allowed)}"
                    )
                values[key] = schema(**given)
        if values.get("adversarial") is not None and values.get("energy") is not None:
            raise ValueError("model.train.extra: adversarial and energy cannot be combined")
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


def class_gaussian_sampler(
    images: torch.Tensor, labels: torch.Tensor
) -> Callable[[int, torch.Generator], torch.Tensor]:
    """Draws from per-class diagonal Gaussians fitted to the training images, clamped to [0, 1] (JEM++'s
    initialisation).

    Langevin chains started there are near the data from the first step, so a few steps suffice.
    """
    classes = labels.unique()
    means = torch.stack([images[labels == c].mean(0) for c in classes])
    stds = torch.stack([images[labels == c].std(0) for c in classes])

    def sample(count: int, generator: torch.Generator) -> torch.Tensor:
        picks = torch.randint(len(classes), (count,), generator=generator)
        noise = torch.randn((count, *images.shape[1:]), generator=generator)
        return (means[picks] + stds[picks] * noise).clamp(0, 1)

    return sample


def uniform_sampler(shape: tuple[int, ...]) -> Callable[[int, torch.Generator], torch.Tensor]:
    def sample(count: int, generator: torch.Generator) -> torch.Tensor:
        return torch.rand((count, *shape), generator=generator)

    return sample


def contrastive_energy(
    net: nn.Module,
    data_logits: torch.Tensor,
    buffer: torch.Tensor,
    settings: EnergySettings,
    fresh_starts: Callable[[int, torch.Generator], torch.Tensor],
    generator: torch.Generator,
    autocast: Callable[[], contextlib.AbstractContextManager],
    memory_format: torch.memory_format = torch.contiguous_format,
) -> tuple[torch.Tensor, float]:
    """JEM's term ``weight * (E(data) - E(samples))`` (plus the l2 penalty) and the energy gap; updates ``buffer``.

    The samples are drawn by Langevin steps from the replay buffer (see ``EnergySettings``); all random
    draws come from the CPU ``generator``, so a GPU run samples exactly as a CPU run.
    """
    device = data_logits.device
    count = len(data_logits)
    # distinct slots: with repeated indices, which sample ``buffer[picks] = samples`` keeps would
    # depend on thread scheduling, and a resumed run would no longer match an uninterrupted one
    picks = torch.randperm(len(buffer), generator=generator)[:count]
    fresh = torch.rand(count, generator=generator) < settings.reinit_prob
    starts = torch.where(fresh[:, None, None, None], fresh_starts(count, generator), buffer[picks])
    starts = starts.to(device).contiguous(memory_format=memory_format)
    noises = [
        settings.noise * torch.randn(starts.shape, generator=generator).to(device) for _ in range(settings.sgld_steps)
    ]

    def energy(x: torch.Tensor) -> torch.Tensor:
        with autocast():
            return energy_of_logits(net(x).float())

    samples = langevin(energy, starts, settings.step_size, noises, create_graph=False)
    buffer[picks] = samples.to(buffer.device)
    data_energy, sample_energy = energy_of_logits(data_logits.float()), energy(samples)
    gap = data_energy.mean() - sample_energy.mean()
    loss = settings.weight * gap
    if settings.energy_l2 > 0:
        loss = loss + settings.energy_l2 * (data_energy.pow(2).mean() + sample_energy.pow(2).mean())
    return loss, gap.item()


def _freeze_batch_norm(net: nn.Module) -> None:
    """Every batch norm normalises with its running statistics and stops updating them (its affine part trains on)."""
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.eval()


def _set_bn_momentum(net: nn.Module, momentum: float) -> None:
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.momentum = momentum


def _has_batch_norm(net: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())


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
    energy_settings = recipe.energy
    if energy_settings is not None:
        if not isinstance(getattr(net, "classifier", None), nn.Module):
            raise ValueError(
                "model.train.extra.energy trains a joint energy model (arch jem); "
                f"{type(net).__name__} has no classifier"
            )
        joint_model, net = net, net.classifier  # the classifier is trained; the JEM-20 readout is only its use
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

    def autocast() -> contextlib.AbstractContextManager:
        return torch.autocast(device.type, dtype=torch.bfloat16) if recipe.bfloat16 else contextlib.nullcontext()

    n_guard = adversarial.guard_images if adversarial else 0
    guard_slice = torch.randperm(len(images), generator=torch.Generator().manual_seed(settings.seed + 7))[:n_guard]
    guard_x, guard_y = images[guard_slice], labels[guard_slice]
    # The guard's memory: best PGD accuracy so far (-1: none yet), and the EMA weights of that epoch.
    guard_best = torch.tensor([-1.0, 0.0])  # [accuracy, epoch]
    best_weights = {f"best/{k}": v.detach().clone() for k, v in ema.module.state_dict().items()} if adversarial else {}
    method_state = {
        "guard_best": guard_best,
        **{f"ema/{k}": v for k, v in ema.module.state_dict().items()},
        **best_weights,
    }
    if energy_settings is not None:
        fresh_starts = (
            class_gaussian_sampler(images, labels)
            if energy_settings.buffer_init == "class_gaussian"
            else uniform_sampler(tuple(images.shape[1:]))
        )
        replay_buffer = fresh_starts(energy_settings.buffer_size, torch.Generator().manual_seed(settings.seed + 13))
        method_state["replay_buffer"] = replay_buffer  # part of the resume state: a resumed run samples the same

    saved = TrainingProgress(0, 0.0)
    if resume is not None and resume.path.is_file():
        saved = load_training_state(resume, net, optimizer, scheduler, generator, method_state)
        progress(f"resumed from {resume.path}: {saved.epochs_done}/{settings.epochs} epochs already done")
    session_start = time.perf_counter()
    stopped_early = False
    for epoch in range(saved.epochs_done, settings.epochs):
        net.train()
        energy_phase = energy_settings is not None and epoch >= energy_settings.start_epoch
        if energy_phase:
            _freeze_batch_norm(net)
        order = torch.randperm(len(images), generator=generator)
        sums = {"loss": 0.0, "accuracy": 0.0, "energy_gap": 0.0}
        epoch_start = time.perf_counter()
        for step in range(steps_per_epoch):
            batch = order[step * settings.batch_size : (step + 1) * settings.batch_size]
            x = batch_augment(images[batch], settings.max_shift, generator)
            x = x.to(device, non_blocking=True).contiguous(memory_format=memory_format)
            y = labels[batch].to(device, non_blocking=True)
            if adversarial:
                done = (epoch * steps_per_epoch + step) / max(1.0, adversarial.warmup_epochs * steps_per_epoch)
                eps = adversarial.eps * min(1.0, done) if adversarial.warmup_epochs > 0 else adversarial.eps
                x = single_step_attack(net, x, y, adversarial, eps, generator, autocast)
            with autocast():
                logits = net(x)
            loss = criterion(logits.float(), y)
            if energy_phase:
                energy_loss, gap = contrastive_energy(
                    net, logits, replay_buffer, energy_settings, fresh_starts, generator, autocast, memory_format
                )
                loss = loss + energy_loss
                sums["energy_gap"] += gap
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"training diverged in epoch {epoch + 1}, step {step + 1} (non-finite loss); the resume file "
                    "holds the last finished epoch: resume from it with a lower lr (or, with energy, a lower "
                    "max_grad_norm or a higher energy_l2)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if energy_phase and energy_settings.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(net.parameters(), energy_settings.max_grad_norm)
            optimizer.step()
            global_step = epoch * steps_per_epoch + step + 1
            scheduler.step_update(global_step)
            ema.update(net, step=global_step)
            sums["loss"] += loss.item()
            sums["accuracy"] += float((logits.argmax(1) == y).float().mean())
        mean_gap = sums["energy_gap"] / steps_per_epoch
        energy_text = f", energy gap E(data) - E(samples) {mean_gap:.3f}" if energy_phase else ""
        line = (
            f"epoch {epoch + 1}/{settings.epochs}: train loss {sums['loss'] / steps_per_epoch:.4f}, "
            f"train accuracy {100 * sums['accuracy'] / steps_per_epoch:.1f}%"
            f"{' (adversarial)' if adversarial else ''}"
            f"{energy_text}"
            f", {time.perf_counter() - epoch_start:.0f} s"
        )
        ema.module.eval()
        if adversarial:
            guard_accuracy = pgd_accuracy(
                ema.module,
                guard_x,
                guard_y,
                adversarial.norm,
                adversarial.eps,
                adversarial.guard_steps,
                2.5 * adversarial.eps / adversarial.guard_steps,
                seed=settings.seed,
            )
            line += f", guard PGD-{adversarial.guard_steps} accuracy {100 * guard_accuracy:.1f}% (training slice)"
            if guard_accuracy > guard_best[0]:
                guard_best.copy_(torch.tensor([guard_accuracy, epoch + 1.0]))
                for k, v in ema.module.state_dict().items():
                    method_state[f"best/{k}"].copy_(v)
            elif guard_accuracy < guard_best[0] - adversarial.guard_drop:
                line += (
                    f": catastrophic overfitting (best {100 * guard_best[0]:.1f}% after epoch {int(guard_best[1])});"
                    " stopping and keeping that epoch's weights"
                )
                stopped_early = True
        if monitor is not None:
            line += f", {monitor(ema.module)}"
        if resume is not None:
            seconds = saved.train_seconds + time.perf_counter() - session_start
            done_epochs = settings.epochs if stopped_early else epoch + 1
            save_training_state(
                resume, TrainingProgress(done_epochs, seconds), net, optimizer, scheduler, generator, method_state
            )
        progress(line)
        if stopped_early:
            break
    final = ema.module
    if adversarial and guard_best[0] >= 0:
        final.load_state_dict({k: method_state[f"best/{k}"] for k in final.state_dict()})
        progress(f"kept the weights of epoch {int(guard_best[1])} (guard PGD accuracy {100 * guard_best[0]:.1f}%)")
    if _has_batch_norm(final) and recipe.bn_refresh_batches > 0:
        refresh = torch.randperm(len(images), generator=torch.Generator().manual_seed(settings.seed + 11))
        refresh = refresh[: recipe.bn_refresh_batches * settings.batch_size].split(settings.batch_size)
        loader = [images[b].to(device).contiguous(memory_format=memory_format) for b in refresh]
        update_bn(loader, final)  # the EMA's averaged running statistics need not fit the averaged weights
    net.load_state_dict(final.state_dict())
    net.to(memory_format=torch.contiguous_format)
    net.eval()
    if energy_settings is not None:
        joint_model.eval()


TRAINING_METHODS.add(
    "fast", TrainingMethod(train_fast, resumable=True, extra=FastRecipe, monitored=True, any_device=True)
)
