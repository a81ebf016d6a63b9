"""``python synthesize.py model_a=A model_b=B``: the full 90-cell matrix of a model pair.

Cells that fail (hard score of the 8-bit image below the threshold, or a non-finite score) are
retried with new seeds, all failed cells of an attempt in one batch, until ``max_attempts``.
The manifest is rewritten atomically after every attempt, so a killed run leaves a valid one.
"""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig
from tqdm import tqdm

from controversial.checkpoints import load_checkpoint
from controversial.data import dataset_info, load_uint8
from controversial.errors import UserError, user_errors_as_messages
from controversial.figures import plot_stimulus_grid
from controversial.readout import CalibratedModel
from controversial.stimuli import MANIFEST_NAME, ManifestRow, save_png, stimulus_filename, write_manifest
from controversial.synthesis import SynthesisSettings, noise_images, ordered_class_pairs, synthesize_batch
from controversial.zoo import PROJECT_ROOT

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda was requested but no CUDA GPU is visible; use device=auto or device=cpu")
    return torch.device(name)


def load_model_pair(model_a: DictConfig, model_b: DictConfig, data_root: str | None) -> list[CalibratedModel]:
    """Load both checkpoints after checking that the pair makes sense."""
    if model_a.name == model_b.name:
        raise UserError(
            f"model_a and model_b are both '{model_a.name}': a model cannot disagree with itself. "
            f"Pick two different models, e.g. model_a={model_a.name} model_b={'vgg' if model_a.name != 'vgg' else 'abs'}."
        )
    if model_a.dataset != model_b.dataset:
        raise UserError(
            f"model_a={model_a.name} was trained on {model_a.dataset} but model_b={model_b.name} on "
            f"{model_b.dataset}; controversial stimuli need two models of the same dataset."
        )
    models = []
    for cfg in (model_a, model_b):
        path = Path(cfg.checkpoint)
        path = path if path.is_absolute() else PROJECT_ROOT / path
        if not path.is_file():
            raise UserError(
                f"no checkpoint for model '{cfg.name}' at {path}. Train it with `python train.py model={cfg.name}` "
                f"(about the command and its time, see models/README.md), or point model_{'a' if cfg is model_a else 'b'}.checkpoint at a file."
            )
        models.append(load_checkpoint(path, data_root))
    return models


@dataclass
class Cell:
    class_a: int
    class_b: int
    seed: int
    init: str


def _initial_images(cells: list[Cell], shape: tuple[int, int, int], init: str, dataset: str, data_cfg: DictConfig) -> tuple[torch.Tensor, list[str]]:
    if init == "noise":
        return noise_images([(c.class_a, c.class_b) for c in cells], [c.seed for c in cells], shape), ["noise"] * len(cells)
    if init == "test_image":
        images, _ = load_uint8(dataset, "test", data_cfg.root, data_cfg.download)
        picks = [int(torch.randint(len(images), (1,), generator=torch.Generator().manual_seed(c.seed * 100 + c.class_a * 10 + c.class_b))) for c in cells]
        return images[picks].float() / 255, [f"test_image:{i}" for i in picks]
    raise UserError(f"init={init!r} is not known; allowed: noise, test_image")


def run(cfg: DictConfig) -> list[ManifestRow]:
    with user_errors_as_messages(log):
        return _run(cfg)


def _run(cfg: DictConfig) -> list[ManifestRow]:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    device = resolve_device(cfg.device)
    models = [m.to(device) for m in load_model_pair(cfg.model_a, cfg.model_b, cfg.data.root)]
    info = dataset_info(cfg.model_a.dataset)
    settings = SynthesisSettings(
        **{k: v for k, v in cfg.synthesis.items()},
        optimizer=instantiate(cfg.optimizer, _partial_=True, _convert_="all"),
    )
    name_a, name_b = cfg.model_a.name, cfg.model_b.name
    pairs = ordered_class_pairs(len(info.class_names))
    rows: list[ManifestRow] = []
    accepted_cells: set[tuple[int, int]] = set()
    grid_images: dict[tuple[int, int], object] = {}
    grid_ranks: dict[tuple[int, int], tuple[bool, float]] = {}
    start = time.perf_counter()
    log.info("synthesizing %s vs %s: %d cells x %d seeds on %s", name_a, name_b, len(pairs), cfg.seeds_per_cell, device)

    for attempt in range(cfg.max_attempts):
        pending = [p for p in pairs if p not in accepted_cells]
        if not pending:
            break
        base = cfg.seed + attempt * cfg.seeds_per_cell
        cells = [Cell(a, b, base + k, "") for (a, b) in pending for k in range(cfg.seeds_per_cell)]
        initial, inits = _initial_images(cells, info.image_shape, cfg.init, info.name, cfg.data)
        targets = torch.tensor([[c.class_a, c.class_b] for c in cells], device=device)
        bar = tqdm(total=settings.max_steps, desc=f"attempt {attempt + 1}/{cfg.max_attempts} ({len(cells)} images)", disable=not cfg.progress, leave=False)

        def on_step(step: int, n_active: int) -> None:
            bar.update(1)
            bar.set_postfix(active=n_active)

        result = synthesize_batch(models, targets, initial.to(device), settings, seed=base, on_step=on_step)
        bar.close()
        per_image_time = result.total_seconds / len(cells)
        for i, (cell, init) in enumerate(zip(cells, inits)):
            key = (cell.class_a, cell.class_b)
            failure = result.failures[i]
            hard = float(result.hard[i])
            accepted = not failure and hard >= settings.threshold
            image = result.images[i].cpu().numpy()
            filename = ""
            if not failure:
                filename = stimulus_filename(name_a, info.class_names[cell.class_a], name_b, info.class_names[cell.class_b], cell.seed)
                save_png(out_dir / filename, image)
            probabilities = result.probabilities[i].cpu()
            rows.append(ManifestRow(
                dataset=info.name, model_a=name_a, model_b=name_b,
                class_a=cell.class_a, class_b=cell.class_b,
                class_a_name=info.class_names[cell.class_a], class_b_name=info.class_names[cell.class_b],
                seed=cell.seed, source="synthetic", init=init,
                steps=int(result.steps[i]), converged=bool(result.converged[i]),
                hard_score=hard, smooth_score=float(result.smooth[i]),
                p_model_a_class_a=float(probabilities[0, 0]), p_model_a_class_b=float(probabilities[0, 1]),
                p_model_b_class_a=float(probabilities[1, 0]), p_model_b_class_b=float(probabilities[1, 1]),
                accepted=accepted,
                status="accepted" if accepted else (f"failed: {failure}" if failure else "below_threshold"),
                image_file=filename, wall_time_s=round(per_image_time, 4),
            ))
            if accepted:
                accepted_cells.add(key)
            rank = (accepted, hard)
            if not failure and rank > grid_ranks.get(key, (False, -1.0)):
                grid_images[key], grid_ranks[key] = image, rank
        write_manifest(out_dir / MANIFEST_NAME, rows)
        log.info("attempt %d: %d/%d cells accepted so far (%.1f s, %.0f%% in model forward/backward)",
                 attempt + 1, len(accepted_cells), len(pairs), result.total_seconds, 100 * result.model_seconds / max(result.total_seconds, 1e-9))

    plot_stimulus_grid(grid_images, {k: k in accepted_cells for k in grid_images}, info.class_names, name_a, name_b, out_dir / "grid.png")
    wall = time.perf_counter() - start
    best = [max(r.hard_score for r in rows if r.cell[2:] == p) for p in pairs]
    summary = (f"{name_a} vs {name_b}: {len(accepted_cells)}/{len(pairs)} cells accepted at threshold {settings.threshold}, "
               f"median best hard score {statistics.median(best):.3f}, wall time {wall:.0f} s -> {out_dir}")
    log.info(summary)
    print(summary)
    return rows
