"""A model's decisions on a folder of labelled images, written in the model-vs-human benchmark's raw-data format
(``subj, session, trial, rt, object_response, category, condition, imagename``), so that ``analyze.py
choices=[<humans' raw-data>, <this folder>]`` puts the model into the benchmark's tables.

The true category (and, where given, the condition) of each image is read from its file name by a regular
expression with named groups ``category`` and optional ``condition``; the default reads the benchmark's own
names (``<trial>_<experiment>_<subject>_<condition>_<category>_...``, e.g. ``0001_cl_s01_bw_boat_40_x.png``).

The decision is a *readout* of the model's class scores (``READOUTS``). ``own``: the arg-max over the
model's own classes (MNIST or CIFAR-10 models on images of those classes). ``imagenet16``: the benchmark's
decision for an ImageNet model imported on ``imagenet16:<path>`` (a coarse class's probability is the mean over
its fine ImageNet classes; METHODS.md 4b), the arg-max over the 16. An image whose category is not among the
model's classes is an error, never a silent mismatch. The scores are the model's logits before calibration:
the calibration (one positive slope, one intercept) keeps their order, while its float32 sigmoid can round a
weakly calibrated model's probabilities to ties, whose arg-max would be the first class.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from controversial.analysis.benchmark.decision_options import BENCHMARK_NAMES, READOUTS
from controversial.analysis.model_responses import load_pixels, model_outputs
from controversial.errors import UserError
from controversial.records.choices import write_trials
from controversial.synthesis.stimuli import DisplayConvention, Inversion
from controversial.zoo.readout import CalibratedModel


@dataclass(frozen=True)
class LabelledImage:
    path: Path
    category: str
    condition: str  # "" when the name carries none (the benchmark's readers then take the humans')


def labelled_images(folder: str | Path, pattern: str = BENCHMARK_NAMES) -> list[LabelledImage]:
    """Every PNG/JPEG in ``folder`` (sorted by name) with the category and condition its name carries."""
    folder = Path(folder)
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if not paths:
        raise FileNotFoundError(f"{folder}: no PNG or JPEG images")
    compiled = re.compile(pattern)
    images = []
    for path in paths:
        match = compiled.search(path.name)
        if match is None or not match.group("category"):
            raise UserError(
                f"{path}: the file name does not match decisions.label_pattern {pattern!r}, so its true category "
                "is unknown; rename the images or set decisions.label_pattern (named group 'category')"
            )
        groups = match.groupdict()
        images.append(LabelledImage(path, groups["category"], groups.get("condition") or ""))
    return images


def decision_scores(models: Sequence[CalibratedModel], images: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """(M, N, K) logits before calibration, float64: in the order of the calibrated probabilities, without the
    float32 ties a flat calibration (a slope near 0) rounds them to."""
    return model_outputs(models, images, CalibratedModel.raw_logits, batch_size)


def write_decisions(
    out: str | Path,
    models: Sequence[CalibratedModel],
    images: Sequence[LabelledImage],
    dataset: str,
    readout: str = "own",
    batch_size: int = 256,
    invert: Inversion = "auto",
) -> tuple[list[Path], DisplayConvention]:
    """One raw-data CSV per model, ``out/<dataset>/<dataset>_<model>_session_1.csv``, atomically."""
    for model in models:
        unknown = sorted({i.category for i in images} - set(model.class_names))
        if unknown:
            raise UserError(
                f"model {model.name!r} has classes {', '.join(model.class_names)}, but the images are labelled "
                f"{', '.join(unknown)} (e.g. {next(i.path for i in images if i.category in unknown)}); readout "
                f"{readout!r} decides among the model's own classes"
            )
    pixels, convention = load_pixels([image.path for image in images], invert)
    p = decision_scores(models, pixels, batch_size)
    written = []
    for m, model in enumerate(models):
        decisions = READOUTS[readout](model, p[m])
        path = Path(out) / dataset / f"{dataset}_{model.name}_session_1.csv"
        write_trials(
            path,
            [
                [model.name, 1, k, "", decision, image.category, image.condition, image.path.name]
                for k, (image, decision) in enumerate(zip(images, decisions), start=1)
            ],
        )
        written.append(path)
    return written, convention
