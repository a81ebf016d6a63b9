"""Bring your own model: a classifier trained elsewhere becomes a self-describing checkpoint, usable by name.

A model source (``MODEL_SOURCES``, ``zoo/sources.py``) builds the network: ``timm:<name>``, ``torchvision:<name>`` or
``python:<module>:<callable>``. The checkpoint's architecture is ``"imported"``, whose ``arch_kwargs``
record the source, its keyword arguments, the output count, the preprocessing and the readout, so
``load_checkpoint`` rebuilds it like any bundled model (a ``python:`` source needs its module importable
then too). The weights are the user's file, loaded strictly; the calibration is fitted on held-out
training images, the accuracy measured on the test split, both of the model as stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import Field, field_validator, model_validator
from torch import nn

from controversial.atomic import atomic_write_text
from controversial.config import SIDECAR_DATASET_KEY, ModelOptions, user_models_dirs
from controversial.datasets import (
    DataOptions,
    DatasetInfo,
    FolderOptions,
    describe_dataset,
    differences,
    same_dataset,
)
from controversial.errors import UserError
from controversial.options import DEVICE_PATTERN, Count, Options, Seed
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.import_checks import (
    check_target,
    missing_preprocessing_message,
    probe,
    quality_warnings,
    upsampling_warning,
)
from controversial.zoo.preprocessing import Imported, Preprocess
from controversial.zoo.readout import IDENTITY, fit_calibration, sigmoid_nll
from controversial.zoo.sources import IMAGENET16_READOUT, build_network, parse_source, readout_module
from controversial.zoo.train_options import CALIBRATIONS, CalibrationName
from controversial.zoo.weights import load_weights, read_weights, sha256_file

log = logging.getLogger(__name__)
RANDOM_WEIGHTS = "random"  # weights=random: the architecture as initialised, for a dry run
RANDOM_NOTE = "random initialisation (weights=random: a dry run, at chance)"

# ---------------------------------------------------------------- the command's options


class ImportOptions(Options):
    """What ``import_model.py`` needs to turn a trained classifier into a checkpoint usable by name."""

    name: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_-]*$",
        description="the model's name (model_a=<name>); letters, digits, _ and -, starting with a letter",
    )
    dataset: str = Field(description="mnist | cifar10 | folder:<path> | imagenet16:<path>")
    source: str = Field(description="timm:<model> | torchvision:<model> | python:<module>:<callable>")
    weights: str | None = Field(
        None,
        description="state dict file (.pt/.pth/.bin, or a checkpoint with 'state_dict'/'model'; .safetensors); "
        f"'{RANDOM_WEIGHTS}': the architecture's random initialisation (seeded by calibration_seed; a dry run "
        "of the whole path, at chance); null: the source's pretrained download (needs a network)",
    )
    arch_kwargs: dict[str, Any] | None = Field(
        None, description="keyword arguments of the model's builder, e.g. arch_kwargs={drop_rate:0.1}"
    )
    input_size: list[int] | None = Field(
        None, min_length=3, max_length=3, description="[C,H,W] the network takes; default: timm's pretrained config"
    )
    mean: list[float] | None = Field(None, description="per-channel mean subtracted; default: timm's pretrained config")
    std: list[float] | None = Field(None, description="per-channel std divided by; default: timm's pretrained config")
    calibration: CalibrationName = Field(
        "cross_entropy", description=f"readout calibration: {', '.join(CALIBRATIONS.names())}"
    )
    calibration_images: Count = Field(
        1000, description="labelled training images (a seeded sample) the calibration is fitted on; never test ones"
    )
    calibration_seed: Seed = 0
    description: str = Field("", description="one paragraph for the model card")
    models_dir: str = Field(
        default_factory=lambda: str(user_models_dirs()[0]),
        description="writes <models_dir>/<dataset>/<name>.pt and <name>.yaml; default: the first folder of "
        "$CONTROVERSIAL_MODELS_DIR, else the per-user data folder, both searched by every command (another folder: "
        "set CONTROVERSIAL_MODELS_DIR to it); never the repository's models/",
    )
    overwrite: bool = Field(False, description="replace an imported model of this name (a bundled one never)")
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (GPU when present) | cpu | cuda[:k]")
    batch_size: Count = Field(256, description="images per forward pass")
    float16: bool = Field(True, description="store weights in float16 (accuracy is measured after the round trip)")
    data: DataOptions = Field(default_factory=DataOptions)
    folder: FolderOptions = Field(
        default_factory=FolderOptions, description="how dataset=folder:<path> or imagenet16:<path> is read"
    )

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        parse_source(value)
        return value

    @field_validator("input_size")
    @classmethod
    def _positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and min(value) < 1:
            raise UserError(f"input_size={value}: channels, height and width must be positive")
        return value

    @model_validator(mode="after")
    def _no_name_clash(self) -> ImportOptions:
        if "__" in self.name:
            raise UserError(f"name={self.name}: '__' separates the two models of a pair option; use one '_'")
        return self


# ---------------------------------------------------------------- the import


@dataclass(frozen=True)
class Preprocessing:
    input_size: list[int]
    mean: list[float]
    std: list[float]
    origin: str  # where the values came from, for the summary and the card


def preprocessing(settings: ImportOptions, net: nn.Module, info: DatasetInfo) -> Preprocessing:
    """The preprocessing options, each defaulting to the network's pretrained config (timm), else required."""
    kind, name = parse_source(settings.source)
    config: dict[str, Any] = {}
    if kind == "timm":
        from timm.data import resolve_data_config

        config = resolve_data_config({}, model=net)
    values = {"input_size": settings.input_size, "mean": settings.mean, "std": settings.std}
    taken = [k for k, v in values.items() if v is None and k in config]
    missing = [k for k, v in values.items() if v is None and k not in config]
    if missing:
        raise UserError(missing_preprocessing_message(settings.source, missing, info))
    chosen: dict[str, list[Any]] = {k: list(v) if v is not None else list(config[k]) for k, v in values.items()}
    origin = f"{', '.join(taken)} from timm's pretrained config of {name}" if taken else "given"
    return Preprocessing(
        [int(v) for v in chosen["input_size"]],
        [float(v) for v in chosen["mean"]],
        [float(v) for v in chosen["std"]],
        origin,
    )


@torch.no_grad()
def collect_logits(net: nn.Module, images: torch.Tensor, batch_size: int, device: torch.device) -> torch.Tensor:
    """Logits of uint8 images, batched, on ``device``; float64 on the CPU."""
    out = [
        net(images[i : i + batch_size].to(device).float().div_(255)).double().cpu()
        for i in range(0, len(images), batch_size)
    ]
    return torch.cat(out)


def calibration_split(
    images: torch.Tensor, labels: torch.Tensor, n: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """A seeded sample of ``n`` training images: never the test split, on which accuracy is measured."""
    n = min(n, len(labels))
    pick = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:n]
    return images[pick], labels[pick], f"{n} training images (a random sample, seed {seed})"


def _float16_round_trip(net: nn.Module) -> None:
    """The weights as the checkpoint stores them, so accuracy and calibration are those of the stored model."""
    state = net.state_dict()
    net.load_state_dict({k: v.half().to(v.dtype) if v.is_floating_point() else v for k, v in state.items()})


def _no_weights_file(kind: str, random_init: bool) -> str:
    if random_init:
        return RANDOM_NOTE
    return "the factory's own (no weights= file)" if kind == "python" else f"{kind}'s pretrained download"


def _check_outputs(net: nn.Module, info: DatasetInfo, n_outputs: int, source: str) -> None:
    with torch.no_grad():
        logits = net(torch.rand(2, *info.image_shape))
    if logits.ndim != 2 or logits.shape[1] != n_outputs:
        raise UserError(
            f"source={source} gives outputs of shape {tuple(logits.shape)} for 2 images of {info.name}; "
            f"expected (2, {n_outputs}): one logit per class of {info.name}. Make the model end in {n_outputs} outputs"
        )


def sidecar_text(options: ModelOptions, info: DatasetInfo) -> str:
    """The model file ``<name>.yaml`` beside the checkpoint: a ``conf/model``-style description whose ``checkpoint``
    is relative to its folder, plus the dataset's description where it is not built in."""
    values = options.model_dump(exclude={"train"})
    values["checkpoint"] = Path(options.checkpoint).name
    if info.source:
        values[SIDECAR_DATASET_KEY] = info.to_dict()
    header = "# Written by import_model.py; model_a=<name> finds it (docs/your_own_model.md).\n"
    return header + yaml.safe_dump(values, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)


def _same_description_as_its_neighbours(info: DatasetInfo, models_dir: Path, name: str) -> None:
    """The other models in ``<models_dir>/<dataset>/`` describe the dataset too; a different description under
    the same name (another folder, or the same one read otherwise) would stop every command that reads both, so it
    is refused here, before anything is written. The same folder at another location (moved, or a copy on
    another machine) is the same dataset (``same_dataset``)."""
    for sidecar in sorted((models_dir / info.name).glob("*.yaml")):
        described = (yaml.safe_load(sidecar.read_text()) or {}).get(SIDECAR_DATASET_KEY)
        if sidecar.stem == name or described is None or same_dataset(DatasetInfo.from_dict(described), info):
            continue
        raise UserError(
            f"dataset={info.source or info.name} is named '{info.name}', but {sidecar} (a model imported before) "
            f"describes a dataset of that name otherwise ({differences(DatasetInfo.from_dict(described), info)}; "
            "that model's first): import onto its folder as it was, or give this dataset another name "
            "(folder.name=<name>)"
        )


def import_model(settings: ImportOptions, command: str = "") -> Path:
    """Build, load, calibrate and measure the model, then write ``<models_dir>/<dataset>/<name>.pt`` and its
    ``<name>.yaml``; returns the checkpoint's path."""
    from controversial.data import load_uint8
    from controversial.zoo.loading import resolve_device

    info = describe_dataset(settings.dataset, settings.folder)
    check_target(settings.name, info.name, Path(settings.models_dir), settings.overwrite)
    _same_description_as_its_neighbours(info, Path(settings.models_dir), settings.name)
    readout = IMAGENET16_READOUT if info.source.startswith("imagenet16:") else ""
    n_outputs = 1000 if readout else len(info.class_names)
    random_init = settings.weights == RANDOM_WEIGHTS
    weights = Path(settings.weights).expanduser() if settings.weights is not None and not random_init else None
    state = read_weights(weights) if weights is not None else None  # a bad file fails before any model is built
    with torch.random.fork_rng(devices=[]):  # weights=random: the same initialisation every time
        torch.manual_seed(settings.calibration_seed)
        pretrained = weights is None and not random_init
        net = build_network(settings.source, n_outputs, settings.arch_kwargs or {}, pretrained=pretrained, named=True)
    if weights is not None and state is not None:
        load_weights(net, state, weights, settings.source)
    chosen = preprocessing(settings, net, info)
    probe(net, chosen.input_size)
    if (warning := upsampling_warning(chosen.input_size, info, chosen.origin)) is not None:
        log.warning(warning)
    model = Imported(net, Preprocess(chosen.input_size, chosen.mean, chosen.std), readout_module(readout)).eval()
    _check_outputs(model, info, len(info.class_names), settings.source)
    if settings.float16:
        _float16_round_trip(model)

    device = resolve_device(settings.device)
    model.to(device)
    train_x, train_y = load_uint8(info.name, "train", settings.data.root, settings.data.download)
    cal_x, cal_y, cal_note = calibration_split(train_x, train_y, settings.calibration_images, settings.calibration_seed)
    del train_x, train_y
    cal_logits = collect_logits(model, cal_x, settings.batch_size, device)
    calibration = fit_calibration(settings.calibration, cal_logits, cal_y)
    test_x, test_y = load_uint8(info.name, "test", settings.data.root, settings.data.download)
    logits = collect_logits(model, test_x, settings.batch_size, device)
    model.to("cpu")

    kind, source_name = parse_source(settings.source)
    metrics: dict[str, Any] = {
        "test_accuracy": float((logits.argmax(1) == test_y).double().mean()),
        "test_nll_uncalibrated": sigmoid_nll(IDENTITY.apply(logits), test_y),
        "test_nll_calibrated": sigmoid_nll(calibration.apply(logits), test_y),
        "n_test": len(test_y),
        "calibrated_on": cal_note,
        "parameters": sum(p.numel() for p in net.parameters()),
        "weights": weights.name if weights else _no_weights_file(kind, random_init),  # + its sha256 below
        "preprocessing": f"input_size={chosen.input_size} mean={chosen.mean} std={chosen.std} ({chosen.origin})",
    }
    if weights is not None:
        metrics["weights_sha256"] = sha256_file(weights)
    nll = (metrics["test_nll_uncalibrated"], metrics["test_nll_calibrated"])
    found = quality_warnings(metrics["test_accuracy"], len(test_y), len(info.class_names), calibration.slope, nll)
    if random_init:  # chance is what a dry run is for; the rest still tells
        found = [w for w in found if not w.startswith("test accuracy")]
    if found:
        metrics["warnings"] = found
    for warning in found:
        log.warning(warning)
    arch_kwargs = {
        "source": settings.source,
        "num_classes": n_outputs,
        "input_size": chosen.input_size,
        "mean": chosen.mean,
        "std": chosen.std,
        "arch_kwargs": dict(settings.arch_kwargs or {}),
        "readout": readout,
    }
    path = Path(settings.models_dir) / info.name / f"{settings.name}.pt"
    description = settings.description or (
        f"{source_name} from {kind}, trained outside the project and imported with import_model.py"
    )
    checkpoint = CheckpointInfo(
        name=settings.name,
        arch="imported",
        arch_kwargs=arch_kwargs,
        dataset=info.name,
        calibration=calibration,
        metrics=metrics,
        train_config={"imported_from": settings.source, "calibration_images": settings.calibration_images},
        command=command,
        card={"paper_name": "", "description": description, "differences": "imported (not trained by train.py)"},
        dataset_info=info if info.source else None,
    )
    save_checkpoint(path, model, checkpoint, float16=settings.float16)
    options = ModelOptions(
        name=settings.name,
        dataset=info.name,
        arch="imported",
        arch_kwargs=arch_kwargs,
        calibration=settings.calibration,
        checkpoint=str(path),
        description=description,
    )
    atomic_write_text(path.with_suffix(".yaml"), sidecar_text(options, info))
    log.info("wrote %s and %s", path, path.with_suffix(".yaml"))
    return path
