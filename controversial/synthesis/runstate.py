"""The state of one model pair's run dir: what is done, what is left, and who may write.

A run dir holds ``manifest.csv``, the PNGs it references and ``run_settings.json``. Re-entering it
(a sweep re-run after a kill, or ``output_dir=`` for a single run) keeps every row whose PNG still
decodes, so accepted cells are skipped and unfinished cells continue with seeds not yet used.
Only one worker writes a run dir at a time: an ``flock`` on ``<dir>/.lock``, which the kernel
releases even when the worker is killed with SIGKILL. The pair is the unit of work (all its cells
are one batch), so locking the pair's dir is what keeps parallel workers from duplicating cells.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from controversial.atomic import atomic_write_text
from controversial.datasets import DatasetInfo, same_dataset
from controversial.errors import UserError
from controversial.records.manifest import MANIFEST_NAME, ManifestRow, read_manifest
from controversial.records.names import stimulus_filename
from controversial.records.runs import RUN_SETTINGS_NAME, row_image
from controversial.synthesis.engine import BatchResult, Finished, score_images
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.stimuli import save_png
from controversial.zoo.protocol import SynthesisModel

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"

Cell = tuple[int, int]  # (class_a, class_b): one entry of a model pair's class-by-class matrix


@contextmanager
def exclusive_run_dir(run_dir: Path) -> Iterator[None]:
    """Hold the run dir's lock; a second worker on the same dir waits, then resumes what is left."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s is being written by another worker; waiting for it to finish", run_dir)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_stale_temp_files(run_dir: Path) -> list[Path]:
    """Delete temp files that a killed writer left behind (call only while holding the lock)."""
    stale = [p for p in run_dir.glob(".*.tmp") if p.is_file()]
    for path in stale:
        path.unlink()
    if stale:
        log.info("removed %d temp file(s) left by an interrupted run in %s", len(stale), run_dir)
    return stale


# Synthesis settings added after runs were recorded, with the value those runs had in effect.
ADDED_SYNTHESIS_DEFAULTS: dict[str, Any] = {
    "stall_steps": None,
    "stall_gain": 0.01,
    "stall_on": "hard",
    "objective": "lse",
    "classes": None,
    "precision": "fp32",
    "torch_compile": False,
    "method": "gradient",
    "scale": 0.0,
    "rotate": 0.0,
    "cppn_layers": 8,
    "cppn_width": 24,
    "generator": {"name": None, "weights": None, "kwargs": {}, "latent_dim": None, "truncation": 2.0, "residual": 0.0},
    "ensemble": "joint",
}
# Likewise for the diffusion sampler's settings (a run with synthesis.method=diffusion records them).
ADDED_DIFFUSION_DEFAULTS: dict[str, Any] = {"guide_until": None, "eta": 0.0}
# Run settings added after runs were recorded; they follow from the checkpoints (hashed), so a run recorded
# without them resumes as if it had recorded the current values.
ADDED_RUN_KEYS = ("dataset", "class_names", "dataset_info")


def check_run_settings(run_dir: Path, settings: dict[str, Any]) -> None:
    """Record the result-relevant settings, or refuse to resume a dir made with different ones.

    Mixing settings in one manifest would make its rows incomparable; ``max_attempts`` is not
    part of them, so raising it is how a finished run retries its failed cells.
    """
    path = run_dir / RUN_SETTINGS_NAME
    current = json.loads(json.dumps(settings))
    if path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        synthesis = previous.get("synthesis", {})
        if "alpha" in synthesis:  # recorded before synthesis.alpha was renamed to synthesis.sharpness
            synthesis["sharpness"] = synthesis.pop("alpha")
        for block, added in (("synthesis", ADDED_SYNTHESIS_DEFAULTS), ("diffusion", ADDED_DIFFUSION_DEFAULTS)):
            recorded = previous.get(block, {})
            for key, value in added.items():  # recorded before the key existed: it had this value
                if key in current.get(block, {}) and key not in recorded:
                    recorded[key] = value
        for key in ADDED_RUN_KEYS:
            if key in current and key not in previous:
                previous[key] = current[key]
        moved = _moved_dataset(previous.get("dataset_info"), current.get("dataset_info"))
        if moved is not None:
            previous["dataset_info"] = current["dataset_info"]
        if previous != current:
            changed = sorted(k for k in previous.keys() | current.keys() if previous.get(k) != current.get(k))
            details = "; ".join(f"{k}: {previous.get(k)!r} -> {current.get(k)!r}" for k in changed)
            raise UserError(
                f"{run_dir} holds a run made with other settings ({details}). Resume it with the "
                f"settings recorded in {path}, or write to a new folder (output_dir=... for one run, "
                "sweep_dir=... for a sweep)."
            )
        if moved is not None and moved.is_dir():  # the record says where the images are now, for export
            recorded = json.loads(path.read_text(encoding="utf-8"))
            recorded["dataset_info"]["source"] = current["dataset_info"]["source"]
            atomic_write_text(path, json.dumps(recorded, indent=2, sort_keys=True) + "\n")
            log.info("%s: the dataset's images are now at %s (recorded)", run_dir, moved)
        return
    atomic_write_text(path, json.dumps(current, indent=2, sort_keys=True) + "\n")


def _moved_dataset(recorded: dict[str, Any] | None, current: dict[str, Any] | None) -> Path | None:
    """The current location of the run's image folder when the record holds the same dataset elsewhere (a run
    dir resumed on another machine, or after the folder moved): the location is not a setting, so it resumes."""
    if not recorded or not current or recorded == current:
        return None
    before, now = DatasetInfo.from_dict(recorded), DatasetInfo.from_dict(current)
    return now.location if same_dataset(before, now) else None


def forget_empty_run(run_dir: Path, fresh: bool) -> bool:
    """After a run that stopped before writing its manifest: remove what it made (lock, settings, orphan PNGs,
    its offline wandb record), so a failed run leaves no folder behind. Only a ``fresh`` run dir (its settings
    written by this run) is touched. Returns whether the run dir was forgotten."""
    if not fresh or (run_dir / MANIFEST_NAME).exists() or not run_dir.is_dir():
        return False
    for path in [run_dir / RUN_SETTINGS_NAME, run_dir / LOCK_NAME, *run_dir.glob("*.png"), *run_dir.glob(".*.tmp")]:
        path.unlink(missing_ok=True)
    shutil.rmtree(run_dir / "wandb", ignore_errors=True)
    if not any(run_dir.iterdir()):
        run_dir.rmdir()
    return True


def _png_decodes(path: Path) -> bool:
    try:
        with Image.open(path) as image:
            image.load()
        return True
    except (OSError, ValueError, SyntaxError):
        return False


def load_finished_rows(run_dir: Path, model_a: str, model_b: str) -> list[ManifestRow]:
    """Rows of an earlier run of this pair whose images are intact; rows with a bad PNG are dropped (and redone)."""
    path = run_dir / MANIFEST_NAME
    if not path.is_file():
        return []
    try:
        rows = read_manifest(path)
    except ValueError as error:
        raise UserError(f"cannot resume from {path}: {error}. Move it away to start this run dir afresh.") from None
    other = sorted({(r.model_a, r.model_b) for r in rows} - {(model_a, model_b)})
    if other:
        raise UserError(
            f"{path} belongs to {other[0][0]} vs {other[0][1]}, not {model_a} vs {model_b}; "
            "point output_dir/sweep_dir at the right folder or a new one."
        )
    kept = [r for r in rows if not r.image_file or _png_decodes(row_image(path, r))]
    if len(kept) < len(rows):
        log.warning(
            "%s: %d row(s) reference a missing or unreadable PNG; those cells will be redone",
            path,
            len(rows) - len(kept),
        )
    return kept


def attempt_seeds(base_seed: int, attempt: int, seeds_per_cell: int) -> list[int]:
    """The seeds of one attempt: attempt k uses base + k*n ... base + k*n + n - 1."""
    first = base_seed + attempt * seeds_per_cell
    return list(range(first, first + seeds_per_cell))


def pending_work(rows: list[ManifestRow], cells: list[Cell], seeds: list[int]) -> list[tuple[Cell, int]]:
    """(cell, seed) jobs of one attempt: cells not yet accepted, seeds without a row for that cell."""
    accepted = {(r.class_a, r.class_b) for r in rows if r.accepted}
    done = {(r.class_a, r.class_b, r.seed) for r in rows}
    return [(cell, seed) for cell in cells if cell not in accepted for seed in seeds if (*cell, seed) not in done]


def attempts_batch(
    rows: list[ManifestRow],
    cells: list[Cell],
    base_seed: int,
    attempt: int,
    seeds_per_cell: int,
    max_attempts: int,
    capacity: int,
) -> tuple[list[tuple[Cell, int]], int]:
    """The (cell, seed) jobs of ``attempt`` plus, while they fit in ``capacity`` images, those of the
    following attempts for the same cells; returns the jobs and the last attempt included.

    A retry typically concerns a few hard cells that run the full step budget, so its batch would
    sit nearly empty; their later seeds ride along almost for free, and the loop then finds those
    attempts done. Whole attempts only, so which seeds ran is easy to tell from the manifest.
    """
    jobs = pending_work(rows, cells, attempt_seeds(base_seed, attempt, seeds_per_cell))
    last = attempt
    while jobs and last + 1 < max_attempts:
        more = pending_work(rows, cells, attempt_seeds(base_seed, last + 1, seeds_per_cell))
        if len(jobs) + len(more) > capacity:
            break
        jobs, last = jobs + more, last + 1
    return jobs, last


def best_rows(rows: list[ManifestRow]) -> dict[Cell, ManifestRow]:
    """Per cell the row to show: accepted before not, then the highest hard score; rows without an image never."""
    best: dict[Cell, ManifestRow] = {}
    for row in rows:
        key = (row.class_a, row.class_b)
        if row.image_file and (
            key not in best or (row.accepted, row.hard_score) > (best[key].accepted, best[key].hard_score)
        ):
            best[key] = row
    return best


@dataclass
class Element:
    """One element of a synthesis batch: a cell and the seed of this attempt at it."""

    class_a: int
    class_b: int
    seed: int


def manifest_row(
    info: DatasetInfo,
    names: tuple[str, str],
    threshold: float,
    out_dir: Path,
    element: Element,
    init: str,
    result: BatchResult,
    i: int,
    per_image_time: float,
) -> ManifestRow:
    """Batch element ``i``'s manifest row, after writing its PNG (unless it failed)."""
    name_a, name_b = names
    failure = result.failures[i]
    hard = float(result.hard[i])
    accepted = not failure and hard >= threshold
    filename = ""
    if not failure:
        filename = stimulus_filename(
            name_a, info.class_names[element.class_a], name_b, info.class_names[element.class_b], element.seed
        )
        save_png(out_dir / filename, result.images[i].cpu().numpy())
    probabilities = result.probabilities[i].cpu()
    return ManifestRow(
        dataset=info.name,
        model_a=name_a,
        model_b=name_b,
        class_a=element.class_a,
        class_b=element.class_b,
        class_a_name=info.class_names[element.class_a],
        class_b_name=info.class_names[element.class_b],
        seed=element.seed,
        source="synthetic",
        init=init,
        steps=int(result.steps[i]),
        converged=bool(result.converged[i]),
        hard_score=hard,
        smooth_score=float(result.smooth[i]),
        p_model_a_class_a=float(probabilities[0, 0]),
        p_model_a_class_b=float(probabilities[0, 1]),
        p_model_b_class_a=float(probabilities[1, 0]),
        p_model_b_class_b=float(probabilities[1, 1]),
        accepted=accepted,
        status="accepted" if accepted else (f"failed: {failure}" if failure else "below_threshold"),
        image_file=filename,
        wall_time_s=round(per_image_time, 4),
    )


def finished_result(
    models: Sequence[SynthesisModel],
    targets: torch.Tensor,
    finished: dict[int, Finished],
    options: SynthesisOptions,
    seconds: float,
    groups: Sequence[int] | None = None,
) -> tuple[list[int], BatchResult]:
    """The elements that finished before an interrupt, scored on their 8-bit images as a whole batch would."""
    index = sorted(finished)
    images = torch.stack([finished[i].image for i in index]).to(targets.device)
    hard, smooth, probabilities = score_images(models, images, targets[index], options, groups)
    failures = [
        finished[i].failure
        or ("" if torch.isfinite(h) and torch.isfinite(m) else "non-finite score of the 8-bit image")
        for i, h, m in zip(index, hard, smooth)
    ]
    result = BatchResult(
        images,
        hard,
        smooth,
        probabilities,
        torch.tensor([finished[i].steps for i in index]),
        torch.tensor([finished[i].converged for i in index]),
        torch.tensor([finished[i].stalled for i in index]),
        failures,
        0.0,
        seconds,
    )
    return index, result
