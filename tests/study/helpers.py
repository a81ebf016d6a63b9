"""Fixture builders for the human-study tests: tiny synthetic sweeps and a fake natural test split."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from controversial.records.manifest import ManifestRow, write_manifest
from controversial.records.names import stimulus_filename
from controversial.synthesis.stimuli import save_png

DIGITS = [str(d) for d in range(10)]
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
WEB_SOURCE = Path(__file__).resolve().parents[2] / "human_study" / "src"


def make_run(
    run_dir: Path,
    model_a: str,
    model_b: str,
    rng: np.random.Generator,
    seeds: int = 1,
    drop: set[tuple[int, int]] = frozenset(),
    accept_rate: float = 1.0,
    dataset: str = "mnist",
) -> list[ManifestRow]:
    """A synthesize-style run dir: every ordered class pair x seed, random PNGs and scores."""
    names = DIGITS if dataset == "mnist" else list(CIFAR_CLASSES)
    shape = (1, 28, 28) if dataset == "mnist" else (3, 32, 32)
    rows = []
    for (a, b), seed in itertools.product(itertools.permutations(range(10), 2), range(seeds)):
        if (a, b) in drop:
            continue
        name = stimulus_filename(model_a, names[a], model_b, names[b], seed)
        save_png(run_dir / name, rng.random(shape))
        score = float(rng.uniform(0.75, 1.0))
        accepted = bool(rng.random() < accept_rate)
        rows.append(
            ManifestRow(
                dataset=dataset,
                model_a=model_a,
                model_b=model_b,
                class_a=a,
                class_b=b,
                class_a_name=names[a],
                class_b_name=names[b],
                seed=seed,
                source="synthetic",
                init="noise",
                steps=100,
                converged=True,
                hard_score=score if accepted else 0.5,
                smooth_score=1.0,
                p_model_a_class_a=0.9,
                p_model_a_class_b=0.1,
                p_model_b_class_a=0.1,
                p_model_b_class_b=0.9,
                accepted=accepted,
                status="accepted" if accepted else "below_threshold",
                image_file=name,
                wall_time_s=0.1,
            )
        )
    write_manifest(run_dir / "manifest.csv", rows)
    return rows


def make_sweep(root: Path, pairs=(("abs", "vgg"), ("kde", "vgg")), seed: int = 0, seeds: int = 1) -> Path:
    """A sweep folder with one run per model pair, ``seeds`` attempts per cell."""
    rng = np.random.default_rng(seed)
    for model_a, model_b in pairs:
        make_run(root / f"{model_a}_vs_{model_b}", model_a, model_b, rng, seeds=seeds)
    return root


def fake_mnist_test(dataset: str, n_per_class: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in for a test split: random uint8 (N,C,H,W) images of the dataset's shape, labels cycling 0..9."""
    shape = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)}[dataset]
    rng = np.random.default_rng(1)
    labels = np.tile(np.arange(10), n_per_class)
    return rng.integers(0, 256, size=(len(labels), *shape), dtype=np.uint8), labels
