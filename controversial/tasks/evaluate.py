"""``python evaluate.py``: model responses (PNAS model format) for a folder of stimuli or synthesis manifests."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from controversial.analysis.model_decisions import labelled_images, write_decisions
from controversial.analysis.model_responses import (
    StimulusImage,
    stimuli_from_folder,
    stimuli_from_manifest,
    write_responses,
)
from controversial.settings import EvaluateSettings, Invocation
from controversial.synthesis.stimuli import INVERSIONS, Inversion
from controversial.zoo.bundled import load_model

log = logging.getLogger(__name__)


def _inversion(value: object) -> Inversion:
    """``invert=auto|true|false`` (Hydra reads true/false as booleans)."""
    text = str(value).lower()
    if text not in INVERSIONS:
        raise ValueError(f"invert={value!r}; allowed: {', '.join(INVERSIONS)}")
    return text  # type: ignore[return-value]


def run(cfg: EvaluateSettings, invocation: Invocation) -> Path:
    """Every model's responses to every stimulus, as ``model_responses.csv`` in ``invocation.out_dir`` (with
    ``decisions.enabled``: each model's decisions as benchmark raw-data CSVs; returns their folder)."""
    out = invocation.out_dir
    if cfg.decisions.enabled:
        return _decisions(cfg, out)
    stimuli: list[StimulusImage] = []
    if cfg.images is not None:
        stimuli += stimuli_from_folder(cfg.images, cfg.naming)
    for manifest in cfg.manifests:
        stimuli += stimuli_from_manifest(manifest, cfg.include_rejected)
    models = [load_model(ref, cfg.dataset, cfg.models_dir, cfg.data.root) for ref in cfg.models]
    start = time.perf_counter()
    path = out / "model_responses.csv"
    _, convention = write_responses(path, models, stimuli, cfg.batch_size, _inversion(cfg.invert))
    elapsed = time.perf_counter() - start
    print(f"display convention: {convention.note}")
    print(f"{len(models)} models x {len(stimuli)} images -> {path} ({elapsed:.1f} s)")
    return path


def _decisions(cfg: EvaluateSettings, out: Path) -> Path:
    """Decisions on labelled images in the benchmark's raw-data format, one CSV per model."""
    assert cfg.images is not None  # checked by EvaluateSettings
    images = labelled_images(cfg.images, cfg.decisions.label_pattern)
    dataset = cfg.decisions.dataset or Path(cfg.images).resolve().name
    models = [load_model(ref, cfg.dataset, cfg.models_dir, cfg.data.root) for ref in cfg.models]
    start = time.perf_counter()
    paths, convention = write_decisions(
        out, models, images, dataset, cfg.decisions.readout, cfg.batch_size, _inversion(cfg.invert)
    )
    print(f"display convention: {convention.note}")
    print(f"{len(models)} models x {len(images)} images -> {out / dataset} ({time.perf_counter() - start:.1f} s)")
    print(f"into the benchmark: python analyze.py 'choices=[<humans raw-data folder>,{out}]'")
    return out / dataset
