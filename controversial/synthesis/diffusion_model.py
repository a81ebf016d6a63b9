"""The image prior of ``synthesis.method=diffusion``: a diffusers ``UNet2DModel`` and its noise schedule.

A prior is a folder: the bundled one (``models/diffusion/<dataset>/ddpm``) or any the user names, e.g. a
CIFAR-10 DDPM saved with ``save_pretrained``. Either a UNet folder (``config.json`` and safetensors weights,
optionally ``scheduler_config.json``) or a pipeline folder with ``unet/`` and ``scheduler/``. Loading reads
JSON and safetensors only, from that folder only (``local_files_only``, symlinks out of it refused; no pickle,
no code from the folder),
and refuses a network whose sample size or channels do not fit the dataset, by name.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from controversial.datasets import dataset_info
from controversial.errors import UserError
from controversial.untrusted import inside
from controversial.zoo.bundled import MODELS_DIR

log = logging.getLogger(__name__)
BUNDLED = "bundled"
PRIORS_DIR = MODELS_DIR / "diffusion"
BUNDLED_NAME = "ddpm"


@dataclass(frozen=True)
class Prior:
    """A denoising network (epsilon prediction, images in [-1, 1]) and the schedule it was trained with."""

    unet: Any  # a diffusers UNet2DModel
    scheduler_config: dict[str, Any]  # for DDIMScheduler.from_config
    folder: Path


def prior_folder(model: str, dataset: str) -> Path:
    """The folder ``diffusion.model`` names: the bundled prior of ``dataset``, or a path."""
    if model == BUNDLED:
        folder = PRIORS_DIR / dataset / BUNDLED_NAME
        if not folder.is_dir():
            known = sorted(p.parent.name for p in PRIORS_DIR.glob(f"*/{BUNDLED_NAME}")) if PRIORS_DIR.is_dir() else []
            raise UserError(
                f"diffusion.model=bundled: there is no bundled diffusion prior for dataset '{dataset}' (bundled: "
                f"{', '.join(known) or 'none'}); set diffusion.model to the folder of a diffusers UNet2DModel "
                "saved with save_pretrained"
            )
        return folder
    folder = Path(model).expanduser()
    if not folder.is_dir():
        raise UserError(
            f"diffusion.model: {model} is not a folder; give 'bundled' or the folder of a diffusers UNet2DModel "
            "saved with save_pretrained (config.json and diffusion_pytorch_model.safetensors)"
        )
    return folder


def _unet_folder(folder: Path, dataset: str) -> Path:
    """``folder``, or its ``unet/`` in a pipeline folder; checked to hold a UNet2DModel in safetensors that
    fits ``dataset``."""
    unet_dir = folder / "unet" if (folder / "unet" / "config.json").is_file() else folder
    config_file = unet_dir / "config.json"
    if not config_file.is_file():
        raise UserError(f"diffusion.model: {folder} has no config.json (nor unet/config.json) of a diffusers UNet")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    kind = config.get("_class_name")
    if kind != "UNet2DModel":
        raise UserError(
            f"diffusion.model: {config_file} describes a {kind!r}; only a diffusers UNet2DModel is supported"
        )
    for path in [config_file, *unet_dir.glob("*.safetensors")]:  # a symlink out of the folder is refused
        inside(folder, path.relative_to(folder), f"diffusion.model {folder}")
    if not any(unet_dir.glob("*.safetensors")):
        raise UserError(
            f"diffusion.model: {unet_dir} has no .safetensors weights; only safetensors are loaded (a pickled .bin "
            "could run code): convert it with save_pretrained(..., safe_serialization=True)"
        )
    check_fits(config, folder, dataset)
    return unet_dir


def _scheduler_config(folder: Path, unet_dir: Path) -> dict[str, Any]:
    """The training noise schedule saved beside the UNet; diffusers' DDPM defaults when none was saved."""
    for path in (folder / "scheduler" / "scheduler_config.json", unet_dir / "scheduler_config.json"):
        if path.is_file():
            inside(folder, path.relative_to(folder), f"diffusion.model {folder}")
            return dict(json.loads(path.read_text(encoding="utf-8")))
    log.warning("%s has no scheduler_config.json: assuming diffusers' DDPM defaults (linear betas, 1000 steps)", folder)
    return {}


def check_fits(config: dict[str, Any], folder: Path, dataset: str) -> None:
    """Refuse a network (by its ``config.json``) whose images are not the dataset's: sample size, channels."""
    channels, height, width = dataset_info(dataset).image_shape
    size = config.get("sample_size")
    size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    made = (config.get("in_channels"), config.get("out_channels"), size)
    if made != (channels, channels, (height, width)):
        raise UserError(
            f"diffusion.model: the UNet in {folder} makes {made[0]}-channel {size[0]}x{size[1]} images "
            f"(out_channels {made[1]}), but dataset '{dataset}' has {channels}-channel {height}x{width} "
            "images; use a prior trained on this dataset's image size"
        )


def weights_sha256(model: str, dataset: str) -> str:
    """One digest of the prior's safetensors weights, for a run's record (a resumed run must use the same prior)."""
    unet_dir = _unet_folder(prior_folder(model, dataset), dataset)
    digest = hashlib.sha256()
    for path in sorted(unet_dir.glob("*.safetensors")):
        with path.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


@lru_cache(maxsize=2)
def load_prior(model: str, dataset: str) -> Prior:
    """The prior ``diffusion.model`` names (``bundled`` or a folder), in float32 on the CPU, checked against
    ``dataset``; cached, so every attempt of a run shares one copy."""
    from diffusers import UNet2DModel

    folder = prior_folder(model, dataset)
    unet_dir = _unet_folder(folder, dataset)
    unet = UNet2DModel.from_pretrained(
        unet_dir, local_files_only=True, use_safetensors=True, torch_dtype=torch.float32, low_cpu_mem_usage=False
    ).eval()
    unet.requires_grad_(False)
    return Prior(unet, _scheduler_config(folder, unet_dir), folder)
