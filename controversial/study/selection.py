"""Which stimuli go into a study: balanced controversial stimuli per model pair, natural images, repeats.

The paper's balance (METHODS.md section 2): within each model pair, every class is model A's target
exactly N/K times and model B's target exactly N/K times (K classes, 10 in the paper). Among the accepted
stimuli, the set with the largest total controversiality under those marginal counts is an integer linear programme,
solved here with scipy's MILP solver (HiGHS).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from controversial.errors import UserError
from controversial.records.manifest import ManifestRow
from controversial.records.runs import RunClasses, find_manifests, newest_rows, row_image, run_classes

log = logging.getLogger(__name__)


class SelectionError(UserError):
    """A selection request the sweep cannot satisfy; the message names the pair and class."""


@dataclass(frozen=True)
class SweepStimulus:
    """A manifest row together with the absolute path of its PNG."""

    row: ManifestRow
    image_path: Path

    @property
    def pair(self) -> tuple[str, str]:
        """The unordered model pair, as a sorted tuple, so that A-vs-B and B-vs-A runs pool."""
        return tuple(sorted((self.row.model_a, self.row.model_b)))  # type: ignore[return-value]

    @property
    def oriented_classes(self) -> tuple[int, int]:
        """(target of the pair's first model, target of its second model) in the sorted orientation."""
        if (self.row.model_a, self.row.model_b) == self.pair:
            return self.row.class_a, self.row.class_b
        return self.row.class_b, self.row.class_a


def collect_sweep(sweep_dir: str | Path) -> list[SweepStimulus]:
    """Every attempt in every run under ``sweep_dir`` (a run, a sweep, or a folder of them: ``records.runs``), once.

    The same attempt (source, models, classes, seed, initialisation) listed by two runs, e.g. a pair re-run,
    is taken from the newer run.
    """
    try:
        manifests = find_manifests(sweep_dir)
    except FileNotFoundError as error:
        raise SelectionError(str(error)) from None
    rows, _ = newest_rows(manifests)
    stimuli = [
        SweepStimulus(row, row_image(path, row) if row.image_file else path.parent.resolve()) for path, row in rows
    ]
    log.info("read %d distinct attempts from %d manifests under %s", len(stimuli), len(manifests), sweep_dir)
    return stimuli


def sweep_classes(sweep_dir: str | Path, stimuli: Sequence[SweepStimulus]) -> RunClasses:
    """The class names the runs under ``sweep_dir`` recorded, and the classes they synthesized, so a study of a
    dataset that is not registered here (an imported model's image folder) still knows its categories."""
    try:
        manifests = find_manifests(sweep_dir)
    except FileNotFoundError as error:
        raise SelectionError(str(error)) from None
    return run_classes(manifests, [s.row for s in stimuli])


def _eligible(stimuli: Iterable[SweepStimulus], sources: Sequence[str]) -> list[SweepStimulus]:
    return [s for s in stimuli if s.row.accepted and s.row.source in sources and s.row.image_file]


def _by_pair(stimuli: Iterable[SweepStimulus]) -> dict[tuple[str, str], list[SweepStimulus]]:
    by_pair: dict[tuple[str, str], list[SweepStimulus]] = defaultdict(list)
    for stim in stimuli:
        by_pair[stim.pair].append(stim)
    return by_pair


def _ranked_per_cell(
    stimuli: Iterable[SweepStimulus],
) -> dict[tuple[tuple[str, str], tuple[int, int]], list[SweepStimulus]]:
    """(model pair, ordered class pair) -> its stimuli, the most controversial first (stable: the first on ties)."""
    by_cell: dict[tuple[tuple[str, str], tuple[int, int]], list[SweepStimulus]] = defaultdict(list)
    for stim in stimuli:
        by_cell[stim.pair, stim.oriented_classes].append(stim)
    return {key: sorted(cell, key=lambda s: -s.row.hard_score) for key, cell in by_cell.items()}


def _best_per_cell(stimuli: list[SweepStimulus]) -> dict[tuple[int, int], SweepStimulus]:
    """One candidate per ordered class pair of one model pair: the most controversial seed (the objective is
    additive)."""
    return {cell: ranked[0] for (_, cell), ranked in _ranked_per_cell(stimuli).items()}


def best_per_cell(
    stimuli: Iterable[SweepStimulus], sources: Sequence[str] = ("synthetic",), per_cell: int = 1
) -> list[SweepStimulus]:
    """The candidates a design chooses from: per model pair and ordered class pair, the ``per_cell`` most
    controversial accepted seeds (in pair order, then cell order, then the most controversial first, so each
    cell's first is the one the paper's selection takes). More than one gives an optimiser more stimuli for the
    pairs it needs most, each a distinct image (another seed's start)."""
    if per_cell < 1:
        raise UserError(f"per_cell must be >= 1, got {per_cell}")
    ranked = _ranked_per_cell(_eligible(stimuli, sources))
    return [stim for key in sorted(ranked) for stim in ranked[key][:per_cell]]


def _class_names(stimuli: Iterable[SweepStimulus]) -> dict[int, str]:
    """Class index -> name as the manifests spell it, for error messages."""
    names: dict[int, str] = {}
    for stim in stimuli:
        names.setdefault(stim.row.class_a, stim.row.class_a_name)
        names.setdefault(stim.row.class_b, stim.row.class_b_name)
    return names


def _solve_pair(
    pair: tuple[str, str],
    cells: dict[tuple[int, int], SweepStimulus],
    per_class: int,
    classes: Sequence[int],
    class_name: dict[int, str],
) -> list[SweepStimulus]:
    """Maximise summed hard controversiality with each class exactly ``per_class`` times per role."""
    first, second = pair
    cells = {cell: stim for cell, stim in cells.items() if cell[0] in classes and cell[1] in classes}
    for model, axis in ((first, 0), (second, 1)):
        for cls in classes:
            available = sum(1 for cell in cells if cell[axis] == cls)
            if available < per_class:
                raise SelectionError(
                    f"pair {first} vs {second}: class '{class_name.get(cls, cls)}' is model {model}'s target in only "
                    f"{available} accepted stimulus cell(s), {per_class} needed; re-synthesize this pair's failed "
                    f"cells (e.g. more seeds or steps) or lower per_pair"
                )
    keys = sorted(cells)
    try:
        picked = balanced_cells(keys, np.array([cells[k].row.hard_score for k in keys]), per_class, classes)
    except SelectionError as error:
        counts_first = {cls: sum(1 for c in cells if c[0] == cls) for cls in classes}
        counts_second = {cls: sum(1 for c in cells if c[1] == cls) for cls in classes}
        scarce = sorted(classes, key=lambda c: min(counts_first[c], counts_second[c]))[:3]
        raise SelectionError(
            f"pair {first} vs {second}: no balanced selection of {per_class * len(classes)} stimuli exists "
            f"({error}); the scarcest classes are "
            + ", ".join(
                f"'{class_name.get(c, c)}' ({counts_first[c]} as {first}'s target, {counts_second[c]} as {second}'s)"
                for c in scarce
            )
        ) from error
    chosen = [cells[keys[i]] for i in picked]
    log.info(
        "pair %s vs %s: %d stimuli, total controversiality %.3f (of %d candidate cells)",
        first,
        second,
        len(chosen),
        sum(s.row.hard_score for s in chosen),
        len(keys),
    )
    return chosen


def _class_list(classes: int | Sequence[int]) -> list[int]:
    """A class count K (classes 0..K-1) or the class indices themselves, as a list of indices."""
    return list(range(classes)) if isinstance(classes, int) else list(classes)


def balanced_cells(
    cells: Sequence[tuple[int, int]], scores: np.ndarray, per_class: int, classes: int | Sequence[int]
) -> np.ndarray:
    """The paper's selection within one model pair: indices of the ``cells`` (first model's target, second's) with the
    largest summed ``scores`` such that every class (of a count K, or of the given indices) is each model's target
    exactly ``per_class`` times (an integer linear programme, HiGHS). Raises SelectionError with the solver's message
    when no such set exists."""
    row_of = {cls: row for row, cls in enumerate(_class_list(classes))}
    constraints = lil_matrix((2 * len(row_of), len(cells)))
    for column, (cls_first, cls_second) in enumerate(cells):
        constraints[row_of[cls_first], column] = 1
        constraints[len(row_of) + row_of[cls_second], column] = 1
    result = milp(
        c=-np.asarray(scores, dtype=np.float64),
        constraints=LinearConstraint(constraints.tocsr(), per_class, per_class),
        integrality=np.ones(len(cells)),
        bounds=Bounds(0, 1),
    )
    if result.status != 0 or result.x is None:
        raise SelectionError(str(result.message))
    return np.flatnonzero(result.x > 0.5)


def select_controversial(
    stimuli: Sequence[SweepStimulus],
    per_pair: int = 20,
    classes: int | Sequence[int] = 10,
    sources: Sequence[str] = ("synthetic",),
) -> list[SweepStimulus]:
    """Balanced, maximally controversial ``per_pair`` stimuli for every model pair in the sweep, over ``classes``
    (a class count K, or the indices of the classes synthesized, e.g. a run's ``synthesis.classes``)."""
    chosen_classes = _class_list(classes)
    n_classes = len(chosen_classes)
    if per_pair <= 0 or per_pair % n_classes:
        raise SelectionError(f"per_pair={per_pair}: must be a positive multiple of {n_classes} (one share per class)")
    if per_pair > n_classes * (n_classes - 1):
        raise SelectionError(
            f"per_pair={per_pair}: at most {n_classes * (n_classes - 1)}, one stimulus per ordered class pair"
        )
    eligible = _eligible(stimuli, sources)
    if not eligible:
        raise SelectionError(f"no accepted stimuli with source in {list(sources)} in the sweep")
    datasets = sorted({s.row.dataset for s in eligible})
    if len(datasets) > 1:
        raise SelectionError(f"the sweep mixes datasets {datasets}; export one study per dataset")
    names = _class_names(eligible)
    by_pair = _by_pair(eligible)
    chosen: list[SweepStimulus] = []
    for pair in sorted(by_pair):
        chosen.extend(_solve_pair(pair, _best_per_cell(by_pair[pair]), per_pair // n_classes, chosen_classes, names))
    return chosen


def select_natural(
    labels: np.ndarray,
    per_class: int,
    classes: int | Sequence[int],
    rng: np.random.Generator,
    exclude: Iterable[int] = (),
) -> list[int]:
    """``per_class`` random test-set indices per class (of a count K, or of the given indices; sorted), skipping
    ``exclude``."""
    labels = np.asarray(labels)
    excluded = set(int(i) for i in exclude)
    chosen: list[int] = []
    for cls in _class_list(classes):
        pool = np.array([i for i in np.flatnonzero(labels == cls) if int(i) not in excluded], dtype=np.int64)
        if len(pool) < per_class:
            raise SelectionError(f"natural images: class {cls} has only {len(pool)} test images, {per_class} needed")
        chosen.extend(int(i) for i in rng.choice(pool, size=per_class, replace=False))
    return sorted(chosen)


def select_repeats(candidates: Sequence[str], n_repeats: int, rng: np.random.Generator) -> list[str]:
    """Which stimuli are shown a second time, for test-retest reliability (the same for everyone)."""
    if n_repeats < 0 or n_repeats > len(candidates):
        raise SelectionError(f"n_repeats={n_repeats}: must be between 0 and the {len(candidates)} selected stimuli")
    picked = rng.choice(len(candidates), size=n_repeats, replace=False)
    return [candidates[i] for i in sorted(int(i) for i in picked)]
