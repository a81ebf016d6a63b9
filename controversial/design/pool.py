"""A benchmark's candidate pool: every cell of every model pair synthesised, plus natural test images, each image
rated by every model, kept as one ``.npz`` (``benchmarks/design.py`` builds it once and reads it on every run).

Per unordered pair of models, the cells are the ordered class pairs (a, b), a != b, listed by offset b - a
(mod 10) so that the first 20 are the paper's balanced ones (every class twice per side: b = a+1 and a+5);
``offsets`` chooses which. Synthesis runs the project's engine with the paper's settings except ``max_steps``
(a CPU budget; 300 by default) and ``stop_score`` (as ``synthesize.py``: an image stops once its hard score
reaches it). With more than one seed per cell the pool's ``seed`` column numbers them; the paper's kind of design
takes each cell's most controversial seed (``best_seed_per_cell``), as a sweep's export does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from controversial.analysis.model_responses import probabilities as model_probabilities
from controversial.analysis.study import NATURAL
from controversial.atomic import atomic_write
from controversial.design.constraints import Pool
from controversial.errors import UserError
from controversial.synthesis.engine import noise_images, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.zoo.readout import CalibratedModel

OFFSETS = (1, 5, 3, 2, 4, 6, 7, 8, 9)  # b = a + offset (mod 10); the first two give the paper's balanced 20 cells
SEED_STRIDE = 100  # seed index k of pair i starts from seed + SEED_STRIDE * k + i: no two (pair, seed) share a start


def pair_cells(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Ten ordered class pairs per offset: each class is each side's target once per offset."""
    if list(offsets[:2]) != [1, 5] or not set(offsets) <= set(range(1, 10)):
        raise UserError(f"offsets must start with 1 5 (the paper's balanced cells) and lie in 1..9, got {offsets}")
    return [(a, (a + d) % 10) for d in offsets for a in range(10)]


@dataclass(frozen=True)
class CandidatePool:
    """Per candidate: model pair (-1 for natural images), target classes, hard score (NaN for natural), true class
    (-1 for synthetic), source (``synthetic`` or ``natural``), seed index, the 8-bit image; and every model's
    calibrated probabilities (M, N, K)."""

    models: tuple[str, ...]
    probabilities: np.ndarray
    pairs: np.ndarray
    classes: np.ndarray
    hard: np.ndarray
    true_class: np.ndarray
    source: np.ndarray
    seed: np.ndarray
    images: np.ndarray

    def design_pool(self) -> Pool:
        """The pool as the optimiser sees it: a condition per candidate ('A|B', names sorted, or natural)."""
        names = self.models
        conditions = tuple(NATURAL if a < 0 else "|".join(sorted((names[a], names[b]))) for a, b in self.pairs.tolist())
        return Pool(conditions, self.classes.astype(np.int64), self.true_class.astype(np.int64))

    def plain(self) -> np.ndarray:
        """(N,) bool: what the paper's kind of study could have had: each cell's most controversial seed, and the
        natural images."""
        return (self.source == "natural") | best_seed_per_cell(
            self.pairs, self.classes, self.hard, self.source == "synthetic"
        )

    def save(self, path: Path) -> None:
        """One compressed ``.npz``, written whole or not at all."""
        with atomic_write(path, "wb") as handle:
            np.savez_compressed(handle, **{**self.__dict__, "models": np.array(self.models)})

    @classmethod
    def load(cls, path: Path) -> CandidatePool:
        """A pool as ``save`` wrote it; pools without a ``source`` or ``seed`` column hold one seed per cell."""
        with np.load(path) as data:
            columns = {key: data[key] for key in data.files}
        pairs = columns["pairs"]
        columns.setdefault("source", np.where(pairs[:, 0] < 0, "natural", "synthetic"))
        columns.setdefault("seed", np.where(columns["source"] == "synthetic", 0, -1))
        fields = cls.__dataclass_fields__
        return cls(
            **{key: value for key, value in columns.items() if key in fields and key != "models"},
            models=tuple(str(n) for n in columns["models"]),
        )


def best_seed_per_cell(pairs: np.ndarray, targets: np.ndarray, hard: np.ndarray, synthetic: np.ndarray) -> np.ndarray:
    """(N,) bool: the synthetic candidates that are their cell's (model pair, ordered class pair) most controversial
    seed, the first such on ties: the one the paper's kind of selection (and a sweep's export) takes per cell."""
    rows = np.flatnonzero(synthetic)
    keys = np.concatenate([pairs[rows], targets[rows]], axis=1)
    order = rows[np.lexsort((rows, -hard[rows], *keys.T[::-1]))]  # by cell, then hard descending, then row
    ordered_keys = np.concatenate([pairs[order], targets[order]], axis=1)
    first = np.ones(len(order), dtype=bool)
    first[1:] = (ordered_keys[1:] != ordered_keys[:-1]).any(axis=1)
    best = np.zeros(len(pairs), dtype=bool)
    best[order[first]] = True
    return best


def synthesize_pool(
    models: Sequence[CalibratedModel],
    test_images: np.ndarray,
    test_labels: np.ndarray,
    offsets: Sequence[int] = OFFSETS,
    seeds_per_cell: int = 1,
    max_steps: int = 300,
    stop_score: float | None = 0.9,
    natural_per_class: int = 50,
    seed: int = 0,
    report: Callable[[str], None] = print,
) -> CandidatePool:
    """Every cell (``pair_cells(offsets)``) of every pair of ``models`` synthesised ``seeds_per_cell`` times from
    uniform noise, plus ``natural_per_class`` random test images per class (drawn from ``seed``), each rated by every
    model. ``test_images``: (N, 1, 28, 28) uint8. ``report``: one line per synthesised batch and per model rated."""
    cells = pair_cells(offsets)
    settings = SynthesisOptions(max_steps=max_steps, stop_score=stop_score)
    start = time.perf_counter()
    images, hard, pairs, seeds = [], [], [], []
    for k in range(seeds_per_cell):
        for i, (a, b) in enumerate(combinations(range(len(models)), 2)):
            pair_seed = seed + SEED_STRIDE * k + i
            initial = noise_images(cells, [pair_seed] * len(cells), (1, 28, 28))
            result = synthesize_batch([models[a], models[b]], torch.tensor(cells), initial, settings, seed=pair_seed)
            images.append(result.images)
            hard.append(result.hard)
            pairs += [(a, b)] * len(cells)
            seeds += [k] * len(cells)
            report(
                f"seed {k}, {models[a].name} vs {models[b].name}: {int((result.hard >= settings.threshold).sum())}/"
                f"{len(cells)} at >= {settings.threshold}, {result.total_seconds:.0f} s "
                f"(total {time.perf_counter() - start:.0f} s)"
            )
    synthetic = torch.cat(images).numpy()  # already 8-bit levels, as floats in [0, 1]
    rng = np.random.default_rng(seed)
    natural = np.sort(
        np.concatenate(
            [rng.choice(np.flatnonzero(test_labels == c), natural_per_class, replace=False) for c in range(10)]
        )
    )
    test = np.asarray(test_images)[natural]
    n_syn, n_nat = len(synthetic), len(natural)
    rated = [_rate(models, synthetic, report), _rate(models, test.astype(np.float32) / 255.0, report)]
    return CandidatePool(
        models=tuple(m.name for m in models),
        probabilities=np.concatenate(rated, axis=1).astype(np.float32),
        pairs=np.concatenate([np.array(pairs, dtype=np.int64), np.full((n_nat, 2), -1, dtype=np.int64)]),
        classes=np.concatenate([np.tile(np.array(cells), (n_syn // len(cells), 1)), np.full((n_nat, 2), -1)]),
        hard=np.concatenate([torch.cat(hard).numpy().astype(np.float64), np.full(n_nat, np.nan)]),
        true_class=np.concatenate([np.full(n_syn, -1), np.asarray(test_labels)[natural]]).astype(np.int64),
        source=np.array(["synthetic"] * n_syn + ["natural"] * n_nat),
        seed=np.concatenate([np.array(seeds, dtype=np.int64), np.full(n_nat, -1)]),
        images=np.concatenate([np.round(synthetic * 255).astype(np.uint8), test]),
    )


def _rate(models: Sequence[CalibratedModel], images: np.ndarray, report: Callable[[str], None]) -> np.ndarray:
    """(M, N, K) every model's calibrated probabilities of (N, 1, 28, 28) images in [0, 1]."""
    rated = []
    for model in models:
        start = time.perf_counter()
        rated.append(model_probabilities([model], images, 256)[0])
        report(f"rated {len(images)} images with {model.name} ({time.perf_counter() - start:.0f} s)")
    return np.stack(rated)
