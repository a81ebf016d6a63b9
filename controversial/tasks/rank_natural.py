"""``python rank_natural.py model_a=A model_b=B top_k=1``: the most controversial test images per cell.

Writes the PNGs, a ``run_settings.json`` naming the dataset's classes, and a ``manifest.csv`` in the
synthesis format (``source=natural``, ``init=natural:<test index>``, ``seed`` = rank within the cell), so a
study can mix them with synthetic stimuli.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Literal

from pydantic import Field, model_validator

from controversial.atomic import atomic_write_text
from controversial.config import ModelOptions, check_pair, register_model_options
from controversial.data import load_uint8
from controversial.datasets import DataOptions, dataset_info
from controversial.options import DEVICE_PATTERN, Count, Options, Probability
from controversial.progress import Progress
from controversial.records.manifest import MANIFEST_NAME, ManifestRow, write_manifest
from controversial.records.names import natural_controversial_filename
from controversial.records.runs import RUN_SETTINGS_NAME
from controversial.synthesis.engine import ordered_class_pairs
from controversial.synthesis.natural import calibrated_logits, top_natural
from controversial.synthesis.stimuli import save_png
from controversial.tasks import Invocation
from controversial.zoo.loading import load_models, resolve_device

log = logging.getLogger(__name__)


class RankNaturalSettings(Options):
    model_a: ModelOptions = Field(description="model A (a name from conf/model/)")
    model_b: ModelOptions = Field(description="model B, of the same dataset")
    top_k: Count = Field(1, description="images exported per cell (ordered class pair)")
    split: Literal["test", "train"] = Field("test", description="dataset split to rank")
    limit: Count | None = Field(None, description="score only the first N images; null: all")
    threshold: Probability = Field(0.75, description="'accepted' column: the image's hard score reaches this")
    sharpness: float = Field(
        1.0, gt=0, description="LogSumExp sharpness of the smooth_score column (the paper's alpha in Eq. 4)"
    )
    batch_size: Count = Field(500, description="images per forward pass")
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="auto (GPU when present) | cpu | cuda[:k]")
    output_dir: str | None = Field(None, description="default: a new timestamped folder")
    progress: bool = Field(True, description="progress bar on a terminal, periodic lines in a log file")
    data: DataOptions = Field(default_factory=DataOptions)

    @model_validator(mode="after")
    def _a_pair(self) -> RankNaturalSettings:
        check_pair(self.model_a, self.model_b)
        return self


def register_options() -> None:
    """The model names of ``model_a=``/``model_b=``: conf/model and the models folders."""
    register_model_options()


def run(cfg: RankNaturalSettings, invocation: Invocation) -> list[ManifestRow]:
    """Rank the split for both models and write the top images of every cell into ``invocation.out_dir``."""
    out_dir = invocation.out_dir
    device = resolve_device(cfg.device)
    models = [m.to(device) for m in load_models([cfg.model_a, cfg.model_b], cfg.data.root, ["model_a", "model_b"])]
    info = dataset_info(cfg.model_a.dataset)
    images, _ = load_uint8(info.name, cfg.split, cfg.data.root, cfg.data.download)
    if cfg.limit is not None:
        images = images[: cfg.limit]
    start = time.perf_counter()
    logits = []
    for model in models:
        with Progress(len(images), f"scoring {model.name}", cfg.progress) as bar:
            logits.append(calibrated_logits(model, images, cfg.batch_size, device, on_batch=bar.update))
    cells = ordered_class_pairs(len(info.class_names))
    picks = top_natural(logits[0], logits[1], cells, cfg.top_k, cfg.sharpness)
    name_a, name_b = cfg.model_a.name, cfg.model_b.name
    per_image = (time.perf_counter() - start) / len(images)
    rows = []
    for pick in picks:
        class_a, class_b = info.class_names[pick.class_a], info.class_names[pick.class_b]
        filename = natural_controversial_filename(name_a, class_a, name_b, class_b, pick.index)
        save_png(out_dir / filename, (images[pick.index].float() / 255).numpy())
        accepted = pick.hard >= cfg.threshold
        rows.append(
            ManifestRow(
                dataset=info.name,
                model_a=name_a,
                model_b=name_b,
                class_a=pick.class_a,
                class_b=pick.class_b,
                class_a_name=class_a,
                class_b_name=class_b,
                seed=pick.rank,
                source="natural",
                init=f"natural:{pick.index}",
                steps=0,
                converged=False,
                hard_score=pick.hard,
                smooth_score=pick.smooth,
                p_model_a_class_a=pick.p_a[0],
                p_model_a_class_b=pick.p_a[1],
                p_model_b_class_a=pick.p_b[0],
                p_model_b_class_b=pick.p_b[1],
                accepted=accepted,
                status="accepted" if accepted else "below_threshold",
                image_file=filename,
                wall_time_s=round(per_image, 6),
            )
        )
    write_manifest(out_dir / MANIFEST_NAME, rows)
    # the classes, for export (records.runs) where the dataset may not be registered
    classes: dict[str, Any] = {"dataset": info.name, "class_names": list(info.class_names)}
    if info.source:  # where the images were read (a moved folder is found elsewhere: datasets.locate)
        classes["dataset_info"] = dataset_info(info.name).to_dict()
    atomic_write_text(out_dir / RUN_SETTINGS_NAME, json.dumps(classes, indent=2, sort_keys=True) + "\n")
    best = [max(r.hard_score for r in rows if (r.class_a, r.class_b) == c) for c in cells]
    n_reaching = sum(score >= cfg.threshold for score in best)
    summary = (
        f"{name_a} vs {name_b}: ranked {len(images)} {cfg.split} images; "
        f"{n_reaching}/{len(cells)} cells have a natural image "
        f"with hard score >= {cfg.threshold} (best {max(best):.3f}); {len(rows)} images exported -> {out_dir}"
    )
    log.info(summary)
    print(summary)
    return rows
