"""``python synthesize.py model_a=A model_b=B``: the full K x (K-1) matrix of a model pair (90 cells for ten
classes), or the cells among ``synthesis.classes``.

Cells that fail (hard score of the 8-bit image below the threshold, or a non-finite score) are
retried with new seeds, all failed cells of an attempt in one batch, until ``max_attempts``; with
``retry_lookahead`` a retry batch also carries the later attempts' seeds of its cells while it stays
within the first attempt's size.
PNGs are written before the manifest rows that reference them, and the manifest is rewritten
atomically after every attempt, so a killed run leaves a valid one. Re-running into the same
folder (a sweep, or ``output_dir=``) resumes: see :mod:`controversial.synthesis.runstate`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator

from controversial.atomic import atomic_write_text
from controversial.config import ModelOptions, check_pair, register_model_options
from controversial.datasets import DataOptions, DatasetInfo, dataset_info
from controversial.display_paths import shown
from controversial.errors import UserError
from controversial.options import DEVICE_PATTERN, Count, Options, Seed
from controversial.progress import Progress
from controversial.records.manifest import MANIFEST_NAME, ManifestRow, read_manifest, write_manifest
from controversial.records.runs import RUN_SETTINGS_NAME
from controversial.synthesis import runstate
from controversial.synthesis.engine import (
    BatchResult,
    Finished,
    ordered_class_pairs,
)
from controversial.synthesis.grids import plot_stimulus_grid
from controversial.synthesis.instances import PairInstances, load_pair_instances, resolve_instances, with_instances
from controversial.synthesis.naturalness import NATURALNESS_NAME, NaturalnessOptions, stimulus_images, summarise
from controversial.synthesis.options import (
    METHODS,
    DiffusionOptions,
    MethodRun,
    OptimizerOptions,
    SynthesisOptions,
    chosen_classes,
)
from controversial.synthesis.runstate import Element, manifest_row
from controversial.synthesis.starts import initial_images
from controversial.synthesis.stimuli import load_png
from controversial.synthesis.sweep_overview import transfer_text
from controversial.synthesis.sweeps import register_pair_options
from controversial.tasks import Invocation
from controversial.tracking import Tracker, WandbOptions, start_tracking
from controversial.zoo.inference import compile_networks
from controversial.zoo.loading import resolve_device

log = logging.getLogger(__name__)


class SynthesizeSettings(Options):
    model_a: ModelOptions = Field(description="model A (a name from conf/model/)")
    model_b: ModelOptions = Field(description="model B, of the same dataset")
    seed: Seed = 0
    seeds_per_cell: Count = Field(1, description="independent starts per cell in the first attempt")
    max_attempts: Count = Field(5, description="failed cells are retried with new seeds until this many attempts")
    retry_lookahead: bool = Field(
        True, description="a retry also runs later attempts' seeds while the batch stays small"
    )
    init: Literal["auto", "noise", "test_image"] = Field(
        "auto",
        description="auto (noise, unless a model declares synthesis_init: test_image) | noise (uniform) | "
        "test_image (random test images)",
    )
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (GPU when present) | cpu | cuda[:k]")
    synthesis: SynthesisOptions = Field(default_factory=SynthesisOptions)
    diffusion: DiffusionOptions = Field(default_factory=DiffusionOptions)
    optimizer: OptimizerOptions = Field(default_factory=OptimizerOptions)
    data: DataOptions = Field(default_factory=DataOptions)
    heldout: bool = Field(True, description="score every stimulus under the models' other trained instances too")
    instances_except: list[int] = Field(
        default_factory=list,
        description="seeds that model_a/model_b.instances=all leave out, so they stay held out (e.g. [2])",
    )
    naturalness: NaturalnessOptions = Field(default_factory=NaturalnessOptions)
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    output_dir: str | None = Field(None, description="re-enter a run dir to resume it; default: a new timestamped one")
    sweep_dir: str | None = Field(None, description="the multirun folder; set it so a re-run resumes the sweep")
    wandb: WandbOptions = Field(default_factory=WandbOptions)
    experiment_name: str | None = Field(None, description="set by experiment=<name>")
    models: list[str] | None = Field(None, description="set by experiment=<name>: the models whose pairs are swept")

    @model_validator(mode="after")
    def _a_pair(self) -> SynthesizeSettings:
        check_pair(self.model_a, self.model_b)
        if self.synthesis.method == "diffusion" and self.init != "auto":
            raise UserError(f"init={self.init} is for gradient ascent; synthesis.method=diffusion starts from noise")
        chosen_classes(self.synthesis.classes, dataset_info(self.model_a.dataset).class_names)  # names checked early
        if self.instances_except and "all" not in (self.model_a.instances, self.model_b.instances):
            raise UserError("instances_except applies to model_a.instances=all or model_b.instances=all; set one")
        return self

    def pair_specs(self) -> list[ModelOptions]:
        """model_a and model_b, ``instances=all`` resolved to seeds (``resolve_instances``)."""
        roles = (("model_a", self.model_a), ("model_b", self.model_b))
        return [resolve_instances(spec, role, self.instances_except) for role, spec in roles]

    @property
    def steps(self) -> int:
        """Steps per attempt: the optimiser's at most, or the sampler's."""
        if self.synthesis.method == "diffusion":
            return self.diffusion.sampling_steps * self.diffusion.recurrence
        return self.synthesis.max_steps

    @property
    def start(self) -> Literal["noise", "test_image", "gaussian"]:
        """The initialisation this run uses: ``init`` itself, or under ``auto`` what the models declare (the
        diffusion method: Gaussian noise)."""
        if self.synthesis.method == "diffusion":
            return "gaussian"
        if self.init != "auto":
            return self.init
        declared = {self.model_a.synthesis_init, self.model_b.synthesis_init}
        return "test_image" if "test_image" in declared else "noise"


def register_options() -> None:
    """The model names of ``model_a=``/``model_b=`` (conf/model and the models folders) and the pairs of ``pair=``."""
    register_pair_options(register_model_options())


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _classes(cfg: SynthesizeSettings) -> tuple[int, ...]:
    """The class indices whose cells this run synthesizes (``synthesis.classes``, else every class)."""
    return chosen_classes(cfg.synthesis.classes, dataset_info(cfg.model_a.dataset).class_names)


def _cells(cfg: SynthesizeSettings) -> list[tuple[int, int]]:
    return ordered_class_pairs(_classes(cfg))


def result_settings(cfg: SynthesizeSettings, specs: Sequence[ModelOptions]) -> dict:
    """What determines a run dir's results; a resumed run must match it (max_attempts may grow). ``specs``: model_a
    and model_b as synthesized (``cfg.pair_specs()``, the seeds of ``instances=all`` resolved once per run).

    It also records the dataset's class names (and ``synthesis.classes`` as indices), so every later stage
    reads a run's classes from here, without the dataset being registered where it runs."""
    info = dataset_info(cfg.model_a.dataset)
    classes = _classes(cfg)
    return {
        "model_a": cfg.model_a.name,
        "model_b": cfg.model_b.name,
        "checkpoint_a_sha256": _sha256(Path(cfg.model_a.checkpoint)),
        "checkpoint_b_sha256": _sha256(Path(cfg.model_b.checkpoint)),
        **{f"instances_{k}": m.instances for k, m in zip("ab", specs) if m.instances},
        "seed": cfg.seed,
        "seeds_per_cell": cfg.seeds_per_cell,
        "init": cfg.start,
        "synthesis": {
            **cfg.synthesis.model_dump(),
            "classes": None if len(classes) == len(info.class_names) else list(classes),
        },
        "optimizer": cfg.optimizer.model_dump(by_alias=True),
        **({"diffusion": _prior_settings(cfg)} if cfg.synthesis.method == "diffusion" else {}),
        "dataset": info.name,
        "class_names": list(info.class_names),
        **({"dataset_info": info.to_dict()} if info.source else {}),  # a folder: where export finds its images
    }


def _prior_settings(cfg: SynthesizeSettings) -> dict:
    """The ``diffusion:`` options and the digest of the prior's weights."""
    from controversial.synthesis.diffusion_model import weights_sha256

    return {**cfg.diffusion.model_dump(), "weights_sha256": weights_sha256(cfg.diffusion.model, cfg.model_a.dataset)}


def _row_context(cfg: SynthesizeSettings) -> tuple[DatasetInfo, tuple[str, str], float]:
    """What every manifest row of this pair shares: the dataset, the model names, the acceptance threshold."""
    return dataset_info(cfg.model_a.dataset), (cfg.model_a.name, cfg.model_b.name), cfg.synthesis.threshold


def _callbacks(bar: Progress, tracker: Tracker, attempt: int, step_offset: int):
    """The engine's per-step hooks for one attempt: the progress bar, and score statistics for tracking."""

    def on_step(step: int, n_active: int) -> None:
        bar.update(1)
        bar.set_postfix(active=n_active)

    def on_scores(step: int, hard: torch.Tensor) -> None:
        tracker.log(
            {
                "attempt": attempt,
                "active": len(hard),
                "hard/median": float(hard.median()),
                "hard/max": float(hard.max()),
            },
            step=step_offset + step,
        )

    return on_step, (on_scores if tracker.enabled else None)


def run(cfg: SynthesizeSettings, invocation: Invocation) -> list[ManifestRow]:
    """One model pair into ``invocation.out_dir`` (resumed when it holds an earlier run of the same settings).

    A run that fails before its first manifest leaves no folder; Ctrl-C keeps what had finished and prints one
    line saying what was kept and the command that resumes (exit status 130).
    """
    fresh = not (invocation.out_dir / RUN_SETTINGS_NAME).exists()
    try:
        return _run(cfg, invocation)
    except KeyboardInterrupt:
        forgotten = runstate.forget_empty_run(invocation.out_dir, fresh)
        if forgotten:
            from controversial.cli import remove_fresh_run_dir  # Hydra's records, when nothing else is left

            remove_fresh_run_dir(invocation.out_dir)
        print(_interrupted(cfg, invocation, forgotten), file=sys.stderr)
        raise SystemExit(130) from None
    except BaseException:
        runstate.forget_empty_run(invocation.out_dir, fresh)
        raise


def _interrupted(cfg: SynthesizeSettings, invocation: Invocation, forgotten: bool) -> str:
    """The one line an interrupt prints: what was kept, and the exact command that resumes."""
    out_dir = invocation.out_dir
    manifest = out_dir / MANIFEST_NAME
    if invocation.multirun:
        again = f"rerun the same -m command: sweep_dir={out_dir.parent} resumes, finished cells are skipped"
    elif forgotten:
        again = f"start again with: {invocation.command}"
    elif "output_dir=" in invocation.command:
        again = f"resume with: {invocation.command}"
    else:
        again = f"resume with: {invocation.command} output_dir={shlex.quote(str(out_dir))}"
    if forgotten or not manifest.is_file():
        return f"interrupted: nothing had finished, so no folder was kept; {again}"
    rows = read_manifest(manifest)
    cells = len(_cells(cfg))
    accepted = len({r.cell for r in rows if r.accepted})
    return f"interrupted: kept {accepted}/{cells} cells accepted ({len(rows)} attempts) in {manifest}; {again}"


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C during a batch, carrying the rows of the elements that had already finished."""

    def __init__(self, kept: list[ManifestRow]) -> None:
        super().__init__()
        self.kept = kept


def _run(cfg: SynthesizeSettings, invocation: Invocation) -> list[ManifestRow]:
    out_dir = invocation.out_dir
    device = resolve_device(cfg.device)
    if cfg.synthesis.method == "diffusion":  # a prior that does not fit the dataset is refused before models load
        from controversial.synthesis.diffusion_model import load_prior

        load_prior(cfg.diffusion.model, cfg.model_a.dataset)
    specs, roles = cfg.pair_specs(), ["model_a", "model_b"]
    models = load_pair_instances(specs, cfg.data.root, roles, cfg.heldout).to(device)
    if cfg.synthesis.torch_compile:
        compile_networks(models.models)
    with runstate.exclusive_run_dir(out_dir):
        runstate.remove_stale_temp_files(out_dir)
        runstate.check_run_settings(out_dir, result_settings(cfg, specs))
        rows = runstate.load_finished_rows(out_dir, cfg.model_a.name, cfg.model_b.name)
        tracker = start_tracking(
            cfg.wandb.mode,
            cfg.wandb.project,
            out_dir,
            run_name=f"{cfg.model_a.name}_vs_{cfg.model_b.name}",
            group=cfg.wandb.group,
            config=cfg.model_dump(by_alias=True),
        )
        try:
            return _synthesize_pair(cfg, models, device, out_dir, rows, tracker)
        finally:
            tracker.finish()


def _synthesize_pair(
    cfg: SynthesizeSettings,
    models: PairInstances,
    device: torch.device,
    out_dir: Path,
    rows: list[ManifestRow],
    tracker: Tracker,
) -> list[ManifestRow]:
    """Every attempt the run still needs, then the grid and the summary line."""
    pairs = _cells(cfg)
    start = time.perf_counter()
    if rows:
        log.info(
            "resuming %s: %d earlier row(s), %d/%d cells already accepted",
            out_dir,
            len(rows),
            len({r.cell for r in rows if r.accepted}),
            len(pairs),
        )
    log.info(
        "synthesizing %s vs %s: %d cells x %d seeds on %s",
        cfg.model_a.name,
        cfg.model_b.name,
        len(pairs),
        cfg.seeds_per_cell,
        device,
    )
    global_step = n_new_rows = 0
    capacity = len(pairs) * cfg.seeds_per_cell if cfg.retry_lookahead else 0  # retries never outgrow the first batch
    for attempt in range(cfg.max_attempts):
        work, last_attempt = runstate.attempts_batch(
            rows, pairs, cfg.seed, attempt, cfg.seeds_per_cell, cfg.max_attempts, capacity
        )
        if not work:
            continue
        attempts = f"{attempt + 1}" if last_attempt == attempt else f"{attempt + 1}-{last_attempt + 1}"
        elements = [Element(a, b, seed) for (a, b), seed in work]
        try:
            new_rows, result = _attempt(cfg, models, device, out_dir, elements, attempts, tracker, attempt, global_step)
        except _Interrupted as stop:  # the finished elements join the manifest, then the interrupt goes on
            if stop.kept:
                write_manifest(out_dir / MANIFEST_NAME, rows + stop.kept)
            raise
        global_step += cfg.steps
        rows = rows + new_rows
        n_new_rows += len(new_rows)
        write_manifest(out_dir / MANIFEST_NAME, rows)
        _report_attempt(tracker, attempt, attempts, rows, new_rows, result, len(pairs), global_step)
    _finish(cfg, out_dir, rows, pairs, n_new_rows, tracker, start)
    return rows


def _attempt(
    cfg: SynthesizeSettings,
    models: PairInstances,
    device: torch.device,
    out_dir: Path,
    elements: list[Element],
    attempts: str,
    tracker: Tracker,
    attempt: int,
    global_step: int,
) -> tuple[list[ManifestRow], BatchResult]:
    """One batch: its starts, the synthesis, and the PNGs and manifest rows of its elements."""
    info = dataset_info(cfg.model_a.dataset)
    names = (cfg.model_a.name, cfg.model_b.name)
    initial, inits = initial_images(elements, info.image_shape, cfg.start, info.name, cfg.data, names)
    targets = torch.tensor([[c.class_a, c.class_b] for c in elements], device=device)
    bar = Progress(cfg.steps, f"attempt {attempts}/{cfg.max_attempts} ({len(elements)} images)", cfg.progress)
    on_step, on_scores = _callbacks(bar, tracker, attempt + 1, global_step)
    base = cfg.seed + attempt * cfg.seeds_per_cell
    finished: dict[int, Finished] = {}
    batch_start = time.perf_counter()
    try:
        run = MethodRun(
            seed=base,
            optimizer=cfg.optimizer,
            diffusion=cfg.diffusion,
            dataset=info.name,
            on_step=on_step,
            on_scores=on_scores,
            on_finished=finished.__setitem__,
            groups=models.groups,
        )
        result = METHODS.get(cfg.synthesis.method)(models.models, targets, initial.to(device), cfg.synthesis, run)
    except KeyboardInterrupt:  # keep the elements that had already finished: their 8-bit images are final
        bar.close()
        kept = []
        if finished:
            index, partial = runstate.finished_result(
                models.models, targets, finished, cfg.synthesis, time.perf_counter() - batch_start, models.groups
            )
            kept = [
                manifest_row(
                    *_row_context(cfg),
                    out_dir,
                    elements[n],
                    inits[n],
                    partial,
                    i,
                    partial.total_seconds / len(elements),
                )
                for i, n in enumerate(index)
            ]
            kept = with_instances(kept, models, partial.images, targets[index], cfg.synthesis.threshold)
        raise _Interrupted(kept) from None
    bar.close()
    per_image_time = result.total_seconds / len(elements)
    new_rows = [
        manifest_row(*_row_context(cfg), out_dir, element, init, result, i, per_image_time)
        for i, (element, init) in enumerate(zip(elements, inits))
    ]
    return with_instances(new_rows, models, result.images, targets, cfg.synthesis.threshold), result


def _report_attempt(
    tracker: Tracker,
    attempt: int,
    attempts: str,
    rows: list[ManifestRow],
    new_rows: list[ManifestRow],
    result: BatchResult,
    n_cells: int,
    global_step: int,
) -> None:
    """The attempt's figures for tracking and the log."""
    n_accepted = len({r.cell for r in rows if r.accepted})
    tracker.log(
        {
            "attempt": attempt + 1,
            "cells_accepted": n_accepted,
            "images_accepted_this_attempt": sum(r.accepted for r in new_rows),
            "images_this_attempt": len(new_rows),
        },
        step=global_step,
    )
    log.info(
        "attempt %s: %d/%d cells accepted so far (%.1f s, %.0f%% in model forward/backward%s)",
        attempts,
        n_accepted,
        n_cells,
        result.total_seconds,
        100 * result.model_seconds / max(result.total_seconds, 1e-9),
        f"; {int(result.stalled.sum())} image(s) stopped as stalled" if bool(result.stalled.any()) else "",
    )


def _finish(
    cfg: SynthesizeSettings,
    out_dir: Path,
    rows: list[ManifestRow],
    pairs: list[tuple[int, int]],
    n_new_rows: int,
    tracker: Tracker,
    start: float,
) -> None:
    """The grid of the best image per cell (kept when nothing changed), the run's summary and its line."""
    info = dataset_info(cfg.model_a.dataset)
    name_a, name_b = cfg.model_a.name, cfg.model_b.name
    grid_path = out_dir / "grid.png"
    if n_new_rows or not grid_path.is_file():  # a re-run with nothing left to do keeps its grid
        best = runstate.best_rows(rows)
        plot_stimulus_grid(
            {k: load_png(out_dir / r.image_file) for k, r in best.items()},
            {k: r.accepted for k, r in best.items()},
            info.class_names,
            name_a,
            name_b,
            grid_path,
            _classes(cfg),
        )
    accepted_cells = {(r.class_a, r.class_b) for r in rows if r.accepted}
    best_scores = [max(r.hard_score for r in rows if r.cell == p) for p in pairs]
    kid_text, kid_record = summarise(stimulus_images(out_dir, [r for r in rows if r.accepted]), info, cfg.naturalness)
    atomic_write_text(out_dir / NATURALNESS_NAME, json.dumps(kid_record, indent=2, sort_keys=True) + "\n")
    tracker.summary(
        {
            "cells_accepted": len(accepted_cells),
            "median_best_hard_score": statistics.median(best_scores),
            **({"kid_x1000": kid_record["kid_x1000"]} if kid_record["available"] else {}),
        }
    )
    tracker.log_image("grid", grid_path)
    wall = time.perf_counter() - start
    summary = (
        f"{name_a} vs {name_b}: {len(accepted_cells)}/{len(pairs)} cells accepted at threshold "
        f"{cfg.synthesis.threshold}, median best hard score {statistics.median(best_scores):.3f}, "
        + (f"{kid_text}, " if kid_text else "")
        + f"wall time {wall:.0f} s{transfer_text(rows)} -> {shown(out_dir)}"
    )
    log.info(summary)
    print(summary)
