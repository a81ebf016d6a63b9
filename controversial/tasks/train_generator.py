"""``python train_generator.py dataset=mnist``: train a bundled generator for the generator parametrisation."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field

from controversial.data import load_uint8
from controversial.datasets import DataOptions, dataset_info
from controversial.options import Count, Options, Seed
from controversial.synthesis.generator_training import train_vae
from controversial.synthesis.generators import (
    GENERATORS_DIR,
    GeneratorInfo,
    generator_path,
    read_generator,
    save_generator,
    write_generator_card,
)
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


class TrainGeneratorSettings(Options):
    dataset: str = Field("mnist", description="the dataset whose training images it learns (mnist, cifar10, ...)")
    name: str = Field("vae", pattern=r"^[A-Za-z0-9_.-]+$", description="written as <models_dir>/<dataset>/<name>.pt")
    arch: Literal["mlp", "conv"] = Field("mlp", description="the VAE: mlp (fully connected) | conv (convolutional)")
    latent_dim: Count = Field(16, description="size of the latent code")
    width: Count = Field(512, description="hidden units (mlp) or channels (conv) of the decoder and encoder")
    epochs: Count = Field(5, description="passes over the training images")
    batch_size: Count = 128
    lr: float = Field(1e-3, gt=0, description="Adam's learning rate")
    beta: float = Field(1.0, gt=0, description="weight of the KL term of the VAE loss")
    seed: Seed = 0
    kid_samples: Count = Field(1000, description="samples whose KID to the test images goes on the model card")
    measure_only: bool = Field(False, description="only re-measure an existing generator's KID and rewrite its card")
    models_dir: str | None = Field(None, description="default: the repository's models/generators/")
    data: DataOptions = Field(default_factory=DataOptions)


def sample_kid(decoder: torch.nn.Module, latent_dim: int, dataset: str, n: int, seed: int) -> dict[str, float]:
    """KID x 10^3 of ``n`` prior samples (z ~ N(0, I)) to the test images, with its floor and ceiling."""
    from controversial.synthesis.naturalness import naturalness

    z = torch.randn(n, latent_dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        images = torch.cat([decoder(chunk) for chunk in z.split(250)])
    measured = naturalness(torch.round(images * 255) / 255, dataset)
    return {
        "samples_kid_x1e3": round(measured.kid, 2),
        "samples_kid_std_x1e3": round(measured.kid_std, 2),
        "kid_floor_x1e3": round(measured.floor, 2),
        "kid_noise_ceiling_x1e3": round(measured.ceiling, 2),
        "kid_samples": n,
    }


def run(cfg: TrainGeneratorSettings, invocation: Invocation) -> Path:
    """Train (or with measure_only, re-measure) and write the generator file; returns its path."""
    from controversial.synthesis.generators import GENERATORS

    info_ds = dataset_info(cfg.dataset)
    path = generator_path(info_ds.name, cfg.name, Path(cfg.models_dir) if cfg.models_dir else GENERATORS_DIR)
    if cfg.measure_only:
        info, state = read_generator(path)
        decoder = GENERATORS.get(info.arch)(**info.arch_kwargs)
        decoder.load_state_dict(state)
    else:
        images, _ = load_uint8(info_ds.name, "train", cfg.data.root, cfg.data.download)
        channels, size = info_ds.image_shape[0], info_ds.image_shape[1]
        decoder, metrics = train_vae(
            images.float() / 255,
            cfg.arch,
            cfg.latent_dim,
            cfg.width,
            cfg.epochs,
            cfg.batch_size,
            cfg.lr,
            cfg.beta,
            cfg.seed,
        )
        info = GeneratorInfo(
            name=cfg.name,
            dataset=info_ds.name,
            arch=f"{cfg.arch}_decoder",
            arch_kwargs={"latent_dim": cfg.latent_dim, "channels": channels, "size": size, "width": cfg.width},
            latent_dim=cfg.latent_dim,
            metrics={**metrics, "parameters": sum(p.numel() for p in decoder.parameters())},
            command=invocation.command,
            card={
                "description": f"The decoder of a VAE ({cfg.arch}, width {cfg.width}) trained on the "
                f"{info_ds.name} training images "
                f"({cfg.epochs} epochs, latent {cfg.latent_dim}, beta {cfg.beta}); the generator parametrisation "
                "searches its latent space.",
            },
            created=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        )
    try:
        info.metrics.update(sample_kid(decoder, info.latent_dim, info_ds.name, cfg.kid_samples, cfg.seed))
    except ImportError:
        log.warning("the naturalness measure is not available here; the card lists no KID for %s", path)
    save_generator(path, decoder, info)
    log.info("wrote %s: %s; card %s", path, info.metrics, write_generator_card(path.parent.parent))
    return path
