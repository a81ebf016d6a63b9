"""Self-describing checkpoints: loading needs nothing but the file (and the data root, for an architecture
registered with ``training_data``, such as the KDE)."""

from __future__ import annotations

import io
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

from controversial import __version__
from controversial.atomic import atomic_write_bytes
from controversial.datasets import DatasetInfo, dataset_info, register_dataset
from controversial.errors import UserError
from controversial.untrusted import safe_component
from controversial.zoo.inference import fold_batch_norms, use_preferred_memory_format, use_second_order_inference
from controversial.zoo.readout import CalibratedModel, Calibration, MirrorAveraged
from controversial.zoo.registry import arch_spec

FORMAT_VERSION = 1


@dataclass
class CheckpointInfo:
    """Everything about a trained model except its weights."""

    name: str
    arch: str
    arch_kwargs: dict[str, Any]
    dataset: str
    calibration: Calibration
    test_time_flip: bool = False  # the readout averages the image and its mirror image (readout.MirrorAveraged)
    metrics: dict[str, Any] = field(default_factory=dict)
    train_config: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    card: dict[str, str] = field(default_factory=dict)  # paper name, description, differences from the paper
    code_version: str = ""
    created: str = ""
    # The dataset's description, for one that is not built in (an imported model's folder): reading the
    # checkpoint registers it, so the file alone says which classes its outputs are.
    dataset_info: DatasetInfo | None = None
    # A feature network's reference statistics (``synthesis.naturalness.reference_statistics``): the features of
    # a fixed sample of test images, the floor and the ceiling of its KID; None for a classifier.
    naturalness: dict[str, Any] | None = None


def code_version() -> str:
    """Package version plus the git commit when run from a checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{__version__}+{commit}" if commit else __version__


def _half(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.half() if v.is_floating_point() else v for k, v in state.items()}


def save_checkpoint(path: str | Path, net: nn.Module, info: CheckpointInfo, float16: bool = True) -> None:
    """Write weights (float16 by default, to keep ``models/`` small) and metadata atomically."""
    state = net.state_dict()
    payload = {
        "format_version": FORMAT_VERSION,
        "name": info.name,
        "arch": info.arch,
        "arch_kwargs": info.arch_kwargs,
        "dataset": info.dataset,
        "calibration": info.calibration.to_dict(),
        "test_time_flip": info.test_time_flip,
        "metrics": info.metrics,
        "train_config": info.train_config,
        "command": info.command,
        "card": info.card,
        "code_version": info.code_version or code_version(),
        "created": info.created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "state_dict": _half(state) if float16 else state,
    }
    if info.dataset_info is not None:
        payload["dataset_info"] = info.dataset_info.to_dict()
    if info.naturalness is not None:
        payload["naturalness"] = info.naturalness
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def read_checkpoint(path: str | Path) -> tuple[CheckpointInfo, dict[str, torch.Tensor]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path}: checkpoint format {payload.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    for key in ("name", "dataset"):  # both become parts of output file names (e.g. model decisions)
        safe_component(payload.get(key), f"{path}: checkpoint {key}")
    info = CheckpointInfo(
        name=payload["name"],
        arch=payload["arch"],
        arch_kwargs=payload["arch_kwargs"],
        dataset=payload["dataset"],
        calibration=Calibration(**payload["calibration"]),
        test_time_flip=payload.get("test_time_flip", False),  # absent from files written before it existed
        metrics=payload["metrics"],
        train_config=payload["train_config"],
        command=payload["command"],
        card=payload["card"],
        code_version=payload["code_version"],
        created=payload["created"],
        dataset_info=register_dataset(DatasetInfo.from_dict(payload["dataset_info"]))
        if "dataset_info" in payload
        else None,
        naturalness=payload.get("naturalness"),
    )
    return info, payload["state_dict"]


def load_checkpoint(path: str | Path, data_root: str | None = None) -> CalibratedModel:
    """Rebuild the architecture, load float32 weights, and wrap it with its calibration (and mirror averaging).

    The result is for inference only: eval mode, frozen weights, batch norms folded into convolutions,
    channels-last layout and second-order convolutions where the architecture opts in.
    """
    info, state = read_checkpoint(path)
    spec = arch_spec(info.arch)
    net = spec.builder(**info.arch_kwargs, **({"data_root": data_root} if spec.training_data else {}))
    net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    fold_batch_norms(net.eval())
    net.requires_grad_(False)
    use_preferred_memory_format(net)
    use_second_order_inference(net)
    if info.test_time_flip:
        net = MirrorAveraged(net)
    model = CalibratedModel(
        net,
        info.calibration,
        info.name,
        info.dataset,
        dataset_info(info.dataset).class_names,
        info.metrics.get("test_accuracy"),
    )
    return model.eval().requires_grad_(False)
