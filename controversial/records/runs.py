"""One rule for "a run, a sweep, or a folder of them", shared by every command that reads synthesis runs.

A run is a folder holding a ``manifest.csv`` (``synthesize.py`` or ``rank_natural.py`` wrote it). A path given
as ``sweep_dir`` (or a folder in ``evaluate.py manifests=``) may be one run, a sweep of runs, or any folder
that holds runs at any depth; symlinked folders are followed (each real folder read once). Hidden folders
(``.hydra``) and sweep overviews (their combined manifest sits beside ``acceptance.md``) are not runs. Two runs
that attempted the same stimulus (source, models, classes, seed, initialisation), e.g. a pair re-run after an
interrupt, are read once: the newest manifest's row wins, and a note names the runs involved.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controversial.datasets import DatasetInfo, dataset_info
from controversial.errors import UserError
from controversial.records.manifest import MANIFEST_NAME, ManifestRow, read_manifest
from controversial.untrusted import inside, safe_component

log = logging.getLogger(__name__)

OVERVIEW_MARK = "acceptance.md"  # written by overview.py beside its combined manifest
RUN_SETTINGS_NAME = "run_settings.json"  # beside a synthesize run's manifest: what determines its results


def find_manifests(root: str | Path, exclude: str | Path | None = None) -> list[Path]:
    """Every run's ``manifest.csv`` at or below ``root`` (following symlinks), in path order; ``exclude`` is a
    folder never read (e.g. the overview being written)."""
    root = Path(root)
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise FileNotFoundError(
            f"{root} {what}: pass a synthesize.py run folder, a sweep (-m ... sweep_dir=...) or a folder of them"
        )
    skip = os.path.realpath(exclude) if exclude is not None else None
    seen: set[str] = set()
    found = []
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen or real == skip:  # a symlink loop, a folder linked twice, or the excluded one
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if MANIFEST_NAME in files and OVERVIEW_MARK not in files:
            found.append(Path(folder) / MANIFEST_NAME)
    if not found:
        raise FileNotFoundError(
            f"no {MANIFEST_NAME} in {root} or any folder below it: pass a synthesize.py run folder, a sweep "
            "(-m ... sweep_dir=...) or a folder of them"
        )
    return sorted(found)


def row_image(manifest: Path, row: ManifestRow) -> Path:
    """The PNG a manifest row names, which must be inside the manifest's run folder (symlinks resolved): a
    manifest from elsewhere cannot make a command read, copy or show a file from anywhere else."""
    try:
        return inside(manifest.parent, row.image_file, f"{manifest}, image_file")
    except UserError as error:
        hint = " (an overview's manifest.csv names the runs' images: pass the sweep folder instead)"
        raise UserError(str(error) + (hint if (manifest.parent / OVERVIEW_MARK).is_file() else "")) from None


def attempt_key(row: ManifestRow) -> tuple:
    """What makes two manifest rows the same attempt (a re-run of it), whatever run folder they are in."""
    return (row.source, row.dataset, row.model_a, row.model_b, *row.cell, row.seed, row.init)


def newest_rows(manifests: Sequence[Path]) -> tuple[list[tuple[Path, ManifestRow]], list[str]]:
    """Every row of ``manifests`` once per attempt, with the manifest it came from, in manifest order; where two
    runs list the same attempt the newest manifest (modification time) wins. Notes name each pair read from
    several runs, so a replaced or combined run is never silent."""
    newest_first = sorted(manifests, key=lambda p: p.stat().st_mtime, reverse=True)
    chosen: dict[tuple, Path] = {}
    rows_of: dict[Path, list[ManifestRow]] = {}
    runs_of_pair: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for path in newest_first:
        rows_of[path] = read_manifest(path)
        for row in rows_of[path]:
            chosen.setdefault(attempt_key(row), path)
            pair = (row.model_a, row.model_b)
            if path.parent not in runs_of_pair[pair]:
                runs_of_pair[pair].append(path.parent)
    out = [(path, row) for path in manifests for row in rows_of[path] if chosen[attempt_key(row)] == path]
    notes = [
        f"{a} vs {b}: read from {len(runs)} runs ({', '.join(str(r) for r in runs)}); an attempt (classes, seed) "
        f"listed by several is taken from the newest, {runs[0]}"
        for (a, b), runs in runs_of_pair.items()
        if len(runs) > 1
    ]
    for note in notes:
        log.info(note)
    return out, notes


@dataclass(frozen=True)
class RunClasses:
    """The classes of the runs under one folder, as the runs recorded them (no dataset lookup needed)."""

    dataset: str
    class_names: tuple[str, ...]  # every class of the dataset; a manifest's class index is a position here
    synthesized: tuple[int, ...]  # the classes whose cells the recorded runs synthesized (``synthesis.classes``)
    described: DatasetInfo | None = None  # a dataset that is not built in, as the runs recorded it (its source)


def _recorded(manifest: Path) -> tuple[str, tuple[str, ...], tuple[int, ...] | None, DatasetInfo | None] | None:
    """(dataset, class names, chosen classes or None for all, the dataset's description if not built in) from a
    run's settings; None when it records none (a run made before the settings named the classes)."""
    path = manifest.parent / RUN_SETTINGS_NAME
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: cannot read the run's settings ({error})") from None
    if "class_names" not in settings or "dataset" not in settings:
        return None
    for name in settings["class_names"]:
        safe_component(name, f"{path}: class_names")
    chosen = settings.get("synthesis", {}).get("classes")
    described = DatasetInfo.from_dict(settings["dataset_info"]) if "dataset_info" in settings else None
    return settings["dataset"], tuple(settings["class_names"]), None if chosen is None else tuple(chosen), described


def run_classes(manifests: Sequence[Path], rows: Sequence[ManifestRow]) -> RunClasses:
    """The classes of ``manifests`` (whose ``rows`` are given): the class names the runs recorded, else those of
    the dataset the rows name (a built-in or a registered one); runs that disagree are an error. The classes
    synthesized are the union of the runs' ``synthesis.classes`` (all classes for a run that chose none)."""
    datasets = sorted({r.dataset for r in rows})
    if len(datasets) > 1:
        raise UserError(f"the runs mix datasets {datasets}; use the runs of one dataset")
    found: dict[tuple[str, tuple[str, ...]], list[Path]] = defaultdict(list)
    synthesized: set[int] = set()
    described = None
    for manifest in manifests:
        recorded = _recorded(manifest)
        if recorded is None:
            continue
        dataset, names, chosen, recorded_info = recorded
        here = described is not None and described.location is not None and described.location.is_dir()
        if recorded_info is not None and not here:  # runs made on several machines: a folder that exists here wins
            described = recorded_info
        found[dataset, names].append(manifest.parent)
        synthesized.update(range(len(names)) if chosen is None else chosen)
    if not found:  # runs recorded before the settings named their classes: the dataset's (a built-in)
        if not datasets:
            raise UserError(f"no manifest rows in {', '.join(str(m) for m in manifests[:3])}: no classes to read")
        info = dataset_info(datasets[0])
        found[info.name, info.class_names].append(Path("(the dataset's registered classes)"))
        synthesized.update(range(len(info.class_names)))
    if len(found) > 1:
        listed = "; ".join(f"{d} {list(n)} in {runs[0]}" for (d, n), runs in found.items())
        raise UserError(f"the runs record different class lists ({listed}); use runs of one dataset")
    (dataset, names), _ = found.popitem()
    return RunClasses(dataset, names, tuple(sorted(synthesized)), described)
