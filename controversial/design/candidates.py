"""The candidate pool a design chooses from: the best accepted stimuli of every sweep cell, and natural images.

Rebuilt deterministically from (sweep, seed), so an adaptive study's later batches see the same pool
and can map earlier batches' image names back to pool entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from controversial.analysis.study import NATURAL
from controversial.datasets import dataset_info
from controversial.design.constraints import Pool
from controversial.records.names import natural_filename
from controversial.study.display import png_to_uint8
from controversial.study.selection import (
    SelectionError,
    SweepStimulus,
    best_per_cell,
    select_controversial,
    select_natural,
)


@dataclass(frozen=True)
class Candidates:
    dataset: str
    controversial: tuple[SweepStimulus, ...]
    natural: tuple[int, ...]  # test-set indices
    names: tuple[str, ...]  # image name of every candidate (controversial first), as exports and analyses use
    images: np.ndarray  # (N, C, H, W) float in [0, 1]
    pool: Pool


def build_candidates(
    stimuli: Sequence[SweepStimulus],
    test_set: tuple[np.ndarray, np.ndarray],
    natural_per_class: int,
    sources: Sequence[str] = ("synthetic",),
    seed: int = 0,
    seeds_per_cell: int = 1,
    class_names: Sequence[str] | None = None,
) -> Candidates:
    """Every accepted cell's ``seeds_per_cell`` most controversial seeds, plus ``natural_per_class`` random test
    images per class; ``class_names``: the classes the runs recorded (default: the registered dataset's)."""
    cells = best_per_cell(stimuli, sources, seeds_per_cell)
    if not cells:
        raise SelectionError(f"no accepted stimuli with source in {list(sources)} in the sweep")
    datasets = sorted({s.row.dataset for s in cells})
    if len(datasets) > 1:
        raise SelectionError(f"the sweep mixes datasets {datasets}; design one study per dataset")
    names_of = tuple(dataset_info(datasets[0]).class_names if class_names is None else class_names)
    test_images, test_labels = test_set
    natural = select_natural(test_labels, natural_per_class, len(names_of), np.random.default_rng(seed))
    pixels = [png_to_uint8(s.image_path.read_bytes()) for s in cells]
    pixels = [p[None] if p.ndim == 2 else np.transpose(p, (2, 0, 1)) for p in pixels]
    images = np.concatenate([np.stack(pixels), np.asarray(test_images)[natural]]).astype(np.float32) / 255.0
    names = tuple(s.image_path.name for s in cells) + tuple(
        natural_filename(datasets[0], i, names_of[int(test_labels[i])]) for i in natural
    )
    conditions = tuple("|".join(s.pair) for s in cells) + (NATURAL,) * len(natural)
    targets = np.array([[s.row.class_a, s.row.class_b] for s in cells] + [[-1, -1]] * len(natural), dtype=np.int64)
    true_class = np.array([-1] * len(cells) + [int(test_labels[i]) for i in natural], dtype=np.int64)
    pool = Pool(conditions, targets, true_class, len(names_of))
    return Candidates(datasets[0], tuple(cells), tuple(natural), names, images, pool)


@dataclass(frozen=True)
class Balanced:
    """The paper's kind of design within a candidate pool: ``per_pair`` balanced stimuli per model pair."""

    chosen: np.ndarray  # sorted pool indices
    per_pair: int


def balanced_design(
    stimuli: Sequence[SweepStimulus],
    candidates: Candidates,
    n_stimuli: int,
    natural_per_class: int,
    sources: Sequence[str] = ("synthetic",),
) -> Balanced:
    """What ``export_study.py`` would choose with the same budget: the most controversial balanced ``per_pair``
    stimuli of every model pair (per_pair the largest multiple of the class count that fits ``n_stimuli``) and
    ``natural_per_class`` of the pool's natural images per class; the yardstick of the relative criterion."""
    pool = candidates.pool
    n_classes = pool.n_classes
    pairs = sorted(set(pool.conditions[i] for i in np.flatnonzero(~pool.natural)))
    slots = n_stimuli - natural_per_class * n_classes
    per_pair = min(max(slots, 0) // len(pairs) // n_classes * n_classes, n_classes * (n_classes - 1))
    if per_pair == 0:
        raise SelectionError(
            f"a balanced design needs {n_classes} stimuli per model pair: {len(pairs)} pairs and "
            f"{natural_per_class * n_classes} natural images do not fit n_stimuli={n_stimuli}"
        )
    index = {name: n for n, name in enumerate(candidates.names)}
    controversial = [index[s.image_path.name] for s in select_controversial(stimuli, per_pair, n_classes, sources)]
    natural = [
        int(n)
        for cls in range(n_classes)
        for n in np.flatnonzero(pool.natural & (pool.true_class == cls))[:natural_per_class]
    ]
    return Balanced(np.sort(np.array(controversial + natural, dtype=np.int64)), per_pair)
