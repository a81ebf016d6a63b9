"""``python train.py model=<name>``: train, evaluate, calibrate, save, and refresh the model card."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import torch
from pydantic import Field, field_validator

from controversial.config import REPO_ROOT, ModelOptions
from controversial.data import load_uint8
from controversial.datasets import DataOptions
from controversial.errors import UserError
from controversial.options import Options, one_of
from controversial.synthesis.naturalness import reference_statistics
from controversial.tasks import Invocation
from controversial.zoo.attacks import module_device
from controversial.zoo.bundled import feature_network_path
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.instances import instance_path
from controversial.zoo.model_card import write_model_card
from controversial.zoo.readout import MirrorAveraged
from controversial.zoo.registry import arch_spec
from controversial.zoo.resume import ResumeFile, recorded_progress
from controversial.zoo.train_options import TRAINING_METHODS, TrainOptions
from controversial.zoo.training import (
    TrainOutcome,
    collect_logits,
    energy_metrics,
    evaluate_and_calibrate,
    evenly_spaced,
    robustness_metrics,
)

log = logging.getLogger(__name__)


class TrainCommandSettings(Options):
    model: ModelOptions = Field(description="the model to train (a name from conf/model/)")
    data: DataOptions = Field(default_factory=DataOptions)
    models_dir: str = Field(
        default_factory=lambda: str(REPO_ROOT / "models"),
        description="checkpoints go to <models_dir>/<dataset>/<name>.pt",
    )
    float16: bool = Field(True, description="store weights in float16 (half the size)")
    overwrite: bool = Field(
        False, description="replace a checkpoint already at the output path (a bundled one included); false: refuse"
    )
    device: str = Field("cpu", description="cpu | cuda (a GPU; the fast CIFAR-10 recipe only, same draws)")
    update_model_card: bool = Field(True, description="regenerate <models_dir>/README.md")
    resume: bool = Field(True, description="continue from resume_file; false: delete it and start over")
    resume_file: str = Field(description="per-epoch training state of long runs")
    seed: int | None = Field(
        None,
        ge=0,
        description="train another instance of the model from this seed, written to <models_dir>/<dataset>/<name>/"
        "seed<K>.pt beside the bundled one (default: the model's train.seed, written to <name>.pt)",
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        return one_of(value, ("cpu", "cuda"))


def _resume_file(
    cfg: TrainCommandSettings, settings: TrainOptions, arch_kwargs: dict, n_train_images: int
) -> ResumeFile | None:
    """The per-epoch state file of a resumable method; with resume=false an old one is removed first.

    Its identity includes the training-set size: another data root would change the schedule's length.
    """
    if not TRAINING_METHODS.get(settings.method).resumable:
        return None
    model_cfg = cfg.model
    resume = ResumeFile(
        Path(cfg.resume_file),
        {
            "name": model_cfg.name,
            "dataset": model_cfg.dataset,
            "arch": model_cfg.arch,
            "arch_kwargs": arch_kwargs,
            "train": model_cfg.train.model_dump(),
            "n_train_images": n_train_images,
        },
    )
    if resume.path.is_file():
        if cfg.resume:
            log.info("resuming from %s", resume.path)
        else:
            log.info("resume=false: removing %s and starting over", resume.path)
            resume.path.unlink()
    log.info("training state is saved after every epoch to %s (removed once the checkpoint is written)", resume.path)
    return resume


def _test_monitor(test_x: torch.Tensor, test_y: torch.Tensor, n: int):
    """Accuracy on ``n`` test images, for the per-epoch progress line only (it never steers training).

    Every k-th image, not the first n: test sets are often stored by class, and the first 2,000
    CIFAR-10 test images are all airplanes and automobiles.
    """
    images, labels, stride = evenly_spaced(test_x, test_y, n)

    def monitor(net: torch.nn.Module) -> str:
        device = module_device(net)
        with torch.no_grad():
            logits = torch.cat([net(images[i : i + 500].to(device)).cpu() for i in range(0, len(images), 500)])
        accuracy = float((logits.argmax(1) == labels).float().mean())
        return f"test accuracy {100 * accuracy:.2f}% (every {stride}th image)"

    return monitor


def _device(name: str, method_name: str, any_device: bool) -> torch.device:
    """The training device: ``cpu`` always works; ``cuda`` needs a GPU and a method that can use it."""
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda":
        raise UserError(f"device '{name}' unknown; allowed: cpu, cuda")
    if not any_device:
        raise UserError(f"device=cuda: training method '{method_name}' runs on the CPU only; use device=cpu")
    if not torch.cuda.is_available():
        raise UserError("device=cuda, but PyTorch sees no CUDA GPU here; use device=cpu")
    return torch.device("cuda")


def _checkpoint_path(cfg: TrainCommandSettings, model_cfg: ModelOptions, instance_seed: int | None) -> Path:
    """Where the checkpoint goes: <models_dir>/<dataset>/<name>.pt, an instance's beside it, a feature network's
    where the naturalness measure looks for it."""
    out = Path(cfg.models_dir)
    if model_cfg.purpose == "features":
        path = feature_network_path(model_cfg.dataset, out)
    else:
        path = out / model_cfg.dataset / f"{model_cfg.name}.pt"
    return path if instance_seed is None else instance_path(path, instance_seed)


def run(cfg: TrainCommandSettings, invocation: Invocation) -> Path:
    """Train ``cfg.model`` and write its checkpoint under ``cfg.models_dir`` (the run dir keeps only logs)."""
    model_cfg = cfg.model
    instance_seed = None if cfg.seed is None or cfg.seed == model_cfg.train.seed else cfg.seed
    if instance_seed is not None:  # another instance: only the seed differs from the recipe
        model_cfg = model_cfg.model_copy(update={"train": model_cfg.train.model_copy(update={"seed": instance_seed})})
        resume_file = Path(cfg.resume_file)
        cfg = cfg.model_copy(
            update={
                "model": model_cfg,
                "resume_file": str(resume_file.with_stem(f"{resume_file.stem}_seed{instance_seed}")),
            }
        )
    path = _checkpoint_path(cfg, model_cfg, instance_seed)
    if path.exists() and not cfg.overwrite:
        raise UserError(
            f"{path} already exists; train into another folder with models_dir=<folder>, or pass overwrite=true "
            "to replace it (bundled checkpoints are part of the repository: replace one only to retrain it)"
        )
    settings = model_cfg.train
    method = TRAINING_METHODS.get(settings.method)
    method.options(settings.extra)  # a typo in train.extra fails here, before the data is loaded
    device = _device(str(cfg.device), settings.method, method.any_device)
    torch.manual_seed(settings.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    arch_kwargs = dict(model_cfg.arch_kwargs)

    train_x, train_y = load_uint8(model_cfg.dataset, "train", cfg.data.root, cfg.data.download)
    test_x, test_y = load_uint8(model_cfg.dataset, "test", cfg.data.root, cfg.data.download)
    train_x, test_x = (
        train_x.float().div_(255),
        test_x.float().div_(255),
    )  # in place: CIFAR-10's train split is 614 MB as float

    spec = arch_spec(model_cfg.arch)
    training_data = {"train_images": train_x, "train_labels": train_y} if spec.training_data else {}
    net = spec.builder(**arch_kwargs, **training_data)
    log.info(
        "training %s (%s, %s parameters) with %s",
        model_cfg.name,
        model_cfg.arch,
        f"{sum(p.numel() for p in net.parameters()):,}",
        settings.method,
    )

    resume = _resume_file(cfg, settings, arch_kwargs, len(train_x))
    start = time.perf_counter()
    method_kwargs: dict = {} if resume is None else {"resume": resume}
    if method.monitored:
        method_kwargs["monitor"] = _test_monitor(test_x, test_y, int(settings.extra.get("monitor_images", 2000)))
    net.to(device)
    outcome = method.train(net, train_x, train_y, settings, lambda message: log.info(message), **method_kwargs)
    outcome = outcome or TrainOutcome()
    # A resumed run's time is summed over its sessions (the resume file keeps the total).
    if resume is not None and resume.path.is_file():
        train_time = recorded_progress(resume.path).train_seconds
    else:
        train_time = time.perf_counter() - start
    arch_kwargs.update(outcome.arch_kwargs)

    robustness = robustness_metrics(net, test_x, test_y, settings)  # PGD runs on the training device
    net.to("cpu")  # evaluation, calibration and the checkpoint are the same whatever the training device
    readout_net = MirrorAveraged(net) if model_cfg.test_time_flip else net
    evaluation = evaluate_and_calibrate(readout_net, test_x, test_y, model_cfg.calibration)
    if model_cfg.test_time_flip:  # what the mirror averaging adds, for the model card
        single_view = collect_logits(net, test_x).argmax(1)
        evaluation.metrics["test_accuracy_single_view"] = float((single_view == test_y).double().mean())
    n_parameters = sum(p.numel() for p in net.parameters())
    metrics = {
        **evaluation.metrics,
        **robustness,
        **energy_metrics(net, test_x, test_y, seed=settings.seed),
        "parameters": n_parameters,
        "train_time_s": round(train_time, 1),
        "trained_on": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }
    log.info(
        "test accuracy %.2f%%, calibration slope %.4g intercept %.4g, NLL %.4f -> %.4f",
        100 * metrics["test_accuracy"],
        evaluation.calibration.slope,
        evaluation.calibration.intercept,
        metrics["test_nll_uncalibrated"],
        metrics["test_nll_calibrated"],
    )

    naturalness = None
    if model_cfg.purpose == "features":  # the reference statistics of the naturalness measure (KID)
        if cfg.float16:  # the reference features of the weights as a load will see them (rounded, as stored)
            net.half().float()
        naturalness = reference_statistics(net.eval(), test_x, settings.seed)
        metrics.update(kid_floor_x1000=naturalness["floor"], kid_ceiling_x1000=naturalness["ceiling"])
        log.info("KID x 10^3: real test images %.1f, uniform noise %.1f", naturalness["floor"], naturalness["ceiling"])

    info = CheckpointInfo(
        name=model_cfg.name,
        arch=model_cfg.arch,
        arch_kwargs=arch_kwargs,
        dataset=model_cfg.dataset,
        calibration=evaluation.calibration,
        test_time_flip=model_cfg.test_time_flip,
        metrics=metrics,
        train_config={**model_cfg.train.model_dump(), "extra": {**settings.extra, **outcome.record}},
        command=invocation.command,
        card={
            "paper_name": model_cfg.paper_name,
            "description": model_cfg.description,
            "differences": model_cfg.differences,
        },
        naturalness=naturalness,
    )
    save_checkpoint(path, net, info, float16=cfg.float16)
    log.info("wrote %s (%.2f MB)", path, path.stat().st_size / 1e6)
    if resume is not None:
        resume.path.unlink(missing_ok=True)  # finished: the next run of this model starts afresh
    if cfg.update_model_card:
        log.info("model card: %s", write_model_card(Path(cfg.models_dir)))
    print(f"{model_cfg.name}: test accuracy {100 * metrics['test_accuracy']:.2f}% -> {path}", file=sys.stderr)
    return path
