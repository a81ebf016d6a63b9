"""Shape bias on cue-conflict images (Geirhos et al., ICLR 2019): of the decisions that name the image's shape or
its texture, the fraction that name the shape.

A cue-conflict stimulus is named ``<shape><k>-<texture><k>.png`` (after the per-observer prefix); the ``category``
column is its shape. Trials whose shape and texture class are the same carry no conflict and are dropped, as are
decisions naming neither class (they count in neither the numerator nor the denominator).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controversial.records.choices import Trial
from controversial.records.csvfile import InputError

_CUE_CONFLICT = re.compile(r"^([A-Za-z]+)\d*-([A-Za-z]+)\d*\.[A-Za-z]+$")


@dataclass(frozen=True)
class ShapeBias:
    """One decision maker (or a pooled group) on the cue-conflict trials whose two classes differ."""

    name: str
    n_conflict: int  # trials with shape != texture
    shape: int  # decisions naming the shape class
    texture: int  # decisions naming the texture class
    shape_bias: float  # shape / (shape + texture); NaN when neither was ever named
    per_category: dict[str, float]  # shape category -> shape bias on its trials
    per_category_cue_accuracy: dict[str, float]  # shape category -> fraction answered with either cue

    @property
    def cue_accuracy(self) -> float:
        """The fraction of conflict trials answered with either cue (the benchmark's cue-conflict accuracy)."""
        return (self.shape + self.texture) / self.n_conflict if self.n_conflict else float("nan")


def cue_classes(trial: Trial) -> tuple[str, str]:
    """(shape, texture) of a cue-conflict trial; the shape from the file name must equal ``category``."""
    match = _CUE_CONFLICT.match(trial.stimulus)
    if match is None:
        raise InputError(
            f"{trial.path}, row {trial.line}, column 'imagename': {trial.image!r} is not a cue-conflict stimulus "
            "name; allowed: <prefix>_<shape><k>-<texture><k>.png (e.g. 0001_s5n_s01_0_bird_00_bird3-clock2.png)"
        )
    shape, texture = match.group(1), match.group(2)
    if shape != trial.category:
        raise InputError(
            f"{trial.path}, row {trial.line}, column 'category': {trial.category!r}, but the image name "
            f"{trial.image!r} says its shape is {shape!r}"
        )
    return shape, texture


def _bias(shape: int, texture: int) -> float:
    return shape / (shape + texture) if shape + texture else float("nan")


def shape_bias_of(name: str, trials: Iterable[Trial]) -> ShapeBias:
    """Shape bias of ``trials`` (one observer's, or several pooled), overall and per shape category."""
    counts: dict[str, list[int]] = {}
    for trial in trials:
        shape, texture = cue_classes(trial)
        if shape == texture:
            continue
        tally = counts.setdefault(shape, [0, 0, 0])
        tally[0] += trial.response == shape
        tally[1] += trial.response == texture
        tally[2] += 1
    shapes = sum(c[0] for c in counts.values())
    textures = sum(c[1] for c in counts.values())
    n = sum(c[2] for c in counts.values())
    per_category = {k: _bias(*counts[k][:2]) for k in sorted(counts)}
    cue_accuracy = {k: (counts[k][0] + counts[k][1]) / counts[k][2] for k in sorted(counts)}
    return ShapeBias(name, n, shapes, textures, _bias(shapes, textures), per_category, cue_accuracy)


def shape_bias(trials: Sequence[Trial]) -> dict[str, ShapeBias]:
    """Shape bias of every decision maker in ``trials`` (keyed by ``subj``, in order of appearance)."""
    by: dict[str, list[Trial]] = {}
    for trial in trials:
        by.setdefault(trial.subject, []).append(trial)
    return {name: shape_bias_of(name, own) for name, own in by.items()}
