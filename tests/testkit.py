"""Helpers shared by test modules: tiny stand-in checkpoints, composed configs, input gradients."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from controversial.cli import load_settings
from controversial.config import CONF_DIR, register_model_options
from controversial.settings import SCHEMAS, Invocation
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch
from controversial.synthesis.sweeps import register_pair_options

IMAGE_SHAPES = {"mnist": [1, 28, 28], "cifar10": [3, 32, 32]}


def write_tiny_checkpoints(folder: Path, names: Sequence[str], dataset: str) -> Path:
    """Tiny random MLPs saved as ``<folder>/<name>.pt`` under the given model names (seeds 1, 2, ...)."""
    for seed, name in enumerate(names, start=1):
        kwargs = {"image_shape": IMAGE_SHAPES[dataset], "hidden": 16, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset=dataset,
            calibration=Calibration(1.0, -1.0, "identity"),
        )
        save_checkpoint(folder / f"{name}.pt", create_arch("tiny_mlp", **kwargs), info)
    return folder


def compose_synthesize(*overrides: str):
    """The synthesize config with these overrides, Hydra's own section included."""
    register_pair_options(register_model_options())
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("synthesize", overrides=list(overrides), return_hydra_config=True)


def settings_for(name: str, overrides: Sequence[str] = ()) -> Any:
    """A command's validated settings, composed from conf/ with these overrides as its entry point would."""
    if name in ("synthesize", "rank_natural"):
        register_pair_options(register_model_options())
    return load_settings(name, SCHEMAS[name], list(overrides))


def run_task(name: str, overrides: Sequence[str], out_dir: Path, command: str = "") -> Any:
    """A command in-process: its settings validated, then its task writing into ``out_dir``."""
    task = importlib.import_module(f"controversial.tasks.{name}")
    return task.run(settings_for(name, overrides), Invocation(Path(out_dir), command or f"python {name}.py"))


def train_in(tmp_path: Path, overrides: Sequence[str]) -> Path:
    """``python train.py`` in-process, with model YAMLs also read from ``tmp_path/conf/model`` and every output
    (checkpoint in float32, resume file) under ``tmp_path``; returns the checkpoint's path."""
    from controversial.cli import validate
    from controversial.settings import TrainCommandSettings
    from controversial.tasks import train

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *overrides,
                f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                f"models_dir={tmp_path / 'models'}",
                f"resume_file={tmp_path / 'resume.pt'}",
                "update_model_card=false",
                "float16=false",
            ],
            return_hydra_config=True,
        )
    return train.run(validate(TrainCommandSettings, cfg), Invocation(tmp_path, "python train.py"))


def input_gradient(net: torch.nn.Module, images: torch.Tensor, cls: int = 3) -> torch.Tensor:
    """d(logit ``cls``)/d(image), summed over the batch."""
    images = images.clone().requires_grad_(True)
    net(images)[:, cls].sum().backward()
    return images.grad
