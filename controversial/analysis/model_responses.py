"""Model responses for a stimulus set: every model's calibrated probability for every (image, class).

Stimuli come from a folder of PNGs or from synthesis manifests; targeted models and classes are taken
from the manifest or parsed from the file names by ``controversial.records.names`` (scheme ``project``
or ``pnas2020``). Output rows are in the PNAS model format read by ``records.responses``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from controversial.errors import UserError
from controversial.records.manifest import read_manifest
from controversial.records.names import Scheme, StimulusName, parse_name
from controversial.records.responses import write_model_responses
from controversial.records.runs import find_manifests, newest_rows, row_image
from controversial.synthesis.stimuli import DisplayConvention, Inversion, display_convention, load_png
from controversial.zoo.protocol import scoring
from controversial.zoo.readout import CalibratedModel

log = logging.getLogger(__name__)
_NOT_STIMULI = {"grid.png"}  # the synthesis overview written next to the stimuli


@dataclass(frozen=True)
class StimulusImage:
    image: str  # the name written to the ``image`` column (as the human ratings file names it)
    path: Path
    targets: tuple[str, str, str, str]  # targeted_model_1, targeted_model_2, targeted_class_1, targeted_class_2
    name: StimulusName | None = None  # what the file name says (folder stimuli)


def stimuli_from_folder(folder: str | Path, naming: Scheme = "project") -> list[StimulusImage]:
    """Every PNG in ``folder`` (sorted), named by ``naming``. A repeated presentation (``_repeated``) must
    hold the same pixels as its first presentation and is listed once; differing pixels are an error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: {'a file, not a folder' if folder.exists() else 'no such folder'}")
    paths = sorted(p for p in folder.glob("*.png") if p.name not in _NOT_STIMULI)
    if not paths:
        raise FileNotFoundError(f"{folder}: no PNG images")
    first: dict[str, StimulusImage] = {}
    repeats = []
    for path in paths:
        name = parse_name(path.name, naming)
        if name.repeated:
            repeats.append((path, name))
            continue
        first[name.image] = StimulusImage(name.image, path, name.targets(), name)
    for path, name in repeats:
        original = first.get(name.image)
        if original is None:
            raise UserError(
                f"{path}: a repeated presentation, but its first presentation {name.image}.png is not in {folder}"
            )
        if not np.array_equal(load_png(path), load_png(original.path)):
            raise UserError(f"{path}: a repeated presentation whose pixels differ from {original.path}")
    if repeats:
        log.info("%s: %d repeated presentations (same pixels) listed once", folder, len(repeats))
    return list(first.values())


def stimuli_from_manifest(path: str | Path, include_rejected: bool = False) -> list[StimulusImage]:
    """The images a synthesis manifest lists (accepted ones unless ``include_rejected``); a folder stands for
    the manifests of the runs in it (a run, a sweep, or a folder of them: ``records.runs``)."""
    path = Path(path)
    found = newest_rows(find_manifests(path))[0] if path.is_dir() else [(path, r) for r in read_manifest(path)]
    rows = [(m, r) for m, r in found if r.image_file and (r.accepted or include_rejected)]
    if not rows:
        raise UserError(f"{path}: no {'' if include_rejected else 'accepted '}images listed")
    return [
        StimulusImage(Path(r.image_file).name, row_image(m, r), (r.model_a, r.model_b, r.class_a_name, r.class_b_name))
        for m, r in rows
    ]


def load_pixels(paths: Sequence[Path], invert: Inversion = "auto") -> tuple[np.ndarray, DisplayConvention]:
    """(N, C, H, W) float32 pixels in the models' convention: images stored as displayed (dark on light,
    like the PNAS release's Experiment 1) are inverted, as ``display_convention`` decides."""
    images = [load_png(path) for path in paths]
    shapes = {im.shape for im in images}
    if len(shapes) > 1:
        raise UserError(f"images differ in shape ({sorted(shapes)}); evaluate one dataset's images at a time")
    convention = display_convention(images, invert)
    pixels = np.stack(images)
    return (1.0 - pixels if convention.invert else pixels), convention


def load_images(stimuli: Sequence[StimulusImage], invert: Inversion = "auto") -> tuple[np.ndarray, DisplayConvention]:
    """The stimuli's pixels in the models' convention (``load_pixels``)."""
    return load_pixels([s.path for s in stimuli], invert)


def model_outputs(
    models: Sequence[CalibratedModel],
    images: np.ndarray,
    output: Callable[[CalibratedModel, torch.Tensor], torch.Tensor],
    batch_size: int = 256,
) -> np.ndarray:
    """(M, N, K) ``output(model, batch)`` of (N, C, H, W) images as float64, batched, no gradients."""
    out = []
    for model in models:
        per_model = []
        for start in range(0, len(images), batch_size):
            batch = torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size]))
            with scoring():
                per_model.append(output(model, batch).double().numpy())
        out.append(np.concatenate(per_model))
    return np.stack(out)


def probabilities(models: Sequence[CalibratedModel], images: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """(M, N, K) calibrated sigmoid probabilities of (N, C, H, W) images."""
    return model_outputs(models, images, CalibratedModel.probabilities, batch_size)


def implausible_accuracies(
    models: Sequence[CalibratedModel], stimuli: Sequence[StimulusImage], p: np.ndarray, margin: float = 0.25
) -> list[str]:
    """One line per model whose arg-max accuracy on the natural test images among ``stimuli`` is more than
    ``margin`` below its model card's test accuracy: the usual sign of images in the wrong display convention
    (inverted or not), which otherwise only shows as a model that predicts people badly."""
    natural = [
        (n, s.name.true_class)
        for n, s in enumerate(stimuli)
        if s.name is not None and s.name.kind == "natural" and s.name.true_class
    ]
    lines = []
    for m, model in enumerate(models):
        known = [(n, model.class_names.index(c)) for n, c in natural if c in model.class_names]
        if model.test_accuracy is None or len(known) < 5:
            continue
        index, truth = np.array(known).T
        accuracy = float((p[m, index].argmax(axis=1) == truth).mean())
        if accuracy < model.test_accuracy - margin:
            lines.append(
                f"{model.name}: {100 * accuracy:.0f}% correct on the {len(known)} natural images here, "
                f"{100 * model.test_accuracy:.0f}% on its model card's test set; are the images inverted "
                "the wrong way (see invert=)?"
            )
    return lines


def write_responses(
    path: str | Path,
    models: Sequence[CalibratedModel],
    stimuli: Sequence[StimulusImage],
    batch_size: int = 256,
    invert: Inversion = "auto",
) -> tuple[np.ndarray, DisplayConvention]:
    """Evaluate every model on every stimulus and write the PNAS model-format CSV atomically."""
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise UserError(f"model names must be unique; got {', '.join(names)}")
    classes = {tuple(m.class_names) for m in models}
    if len(classes) != 1:
        raise UserError(f"models disagree on class names: {sorted(classes)}")
    image_names = [s.image for s in stimuli]
    if len(set(image_names)) != len(image_names):
        raise UserError("two stimuli share an image name; the image column would be ambiguous")
    class_names = classes.pop()
    images, convention = load_images(stimuli, invert)
    p = probabilities(models, images, batch_size)
    rows = [
        [name, s.image, class_names[k], *s.targets, float(p[m, n, k])]
        for m, name in enumerate(names)
        for n, s in enumerate(stimuli)
        for k in range(len(class_names))
    ]
    write_model_responses(path, rows)
    log.info(
        "wrote %d rows (%d models x %d images x %d classes) to %s",
        len(rows),
        len(names),
        len(stimuli),
        len(class_names),
        path,
    )
    return p, convention
