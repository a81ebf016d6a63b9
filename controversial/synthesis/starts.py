"""Where each element of a synthesis batch starts: uniform noise, a test image, or (for the diffusion method)
Gaussian noise; always a function of the cell and its seed, never of the batch it runs in."""

from __future__ import annotations

import zlib

import torch

from controversial.data import load_uint8
from controversial.datasets import DataOptions
from controversial.errors import UserError
from controversial.synthesis.engine import gaussian_noise, noise_images
from controversial.synthesis.runstate import Element


def start_seed(element: Element, pair_names: tuple[str, str]) -> int:
    """The seed of a cell's test-image start: its seed, its classes and the model pair, so that one cell
    starts from different photos in different pairs (a study would otherwise show near-duplicates).
    A 32-bit hash, because torch's CPU generator keeps only the low 32 bits of a seed."""
    key = f"{element.seed}:{element.class_a}:{element.class_b}:{pair_names[0]}:{pair_names[1]}"
    return zlib.crc32(key.encode())


def initial_images(
    elements: list[Element],
    shape: tuple[int, int, int],
    init: str,
    dataset: str,
    data_cfg: DataOptions,
    pair_names: tuple[str, str],
) -> tuple[torch.Tensor, list[str]]:
    """The (N, C, H, W) starts of ``elements`` and their manifest ``init`` labels."""
    cells, seeds = [(c.class_a, c.class_b) for c in elements], [c.seed for c in elements]
    if init == "noise":
        return noise_images(cells, seeds, shape), ["noise"] * len(elements)
    if init == "gaussian":
        return gaussian_noise(cells, seeds, shape), ["gaussian"] * len(elements)
    if init == "test_image":
        images, _ = load_uint8(dataset, "test", data_cfg.root, data_cfg.download)
        picks = [
            int(torch.randint(len(images), (1,), generator=torch.Generator().manual_seed(start_seed(c, pair_names))))
            for c in elements
        ]
        return images[picks].float() / 255, [f"test_image:{i}" for i in picks]
    raise UserError(f"init={init!r} is not known; allowed: noise, test_image")
