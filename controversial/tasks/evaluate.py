"""``python evaluate.py``: model responses (PNAS model format) for a folder of stimuli or synthesis manifests."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator
from controversial.options import Count, Options
from controversial.datasets import ModelDataOptions
from controversial.records.names import Scheme
from controversial.synthesis.stimuli import Inversion, parse_inversion
from controversial.tasks import Invocation


import logging
import time
from pathlib import Path

from controversial.analysis.model_responses import (
    StimulusImage,
    stimuli_from_folder,
    stimuli_from_manifest,
    write_responses,
)
from controversial.synthesis.stimuli import INVERSIONS
from controversial.zoo.bundled import load_model

log = logging.getLogger(__name__)


class EvaluateSettings(Options):
    models: list[str] = Field(
        default_factory=list, min_length=1, description="trained model names (models/<dataset>/<name>.pt) or .pt paths"
    )
    dataset: str | None = Field(None, description="needed only when a model name exists for several datasets")
    models_dir: str | None = Field(None, description="default: the repository's models/")
    images: str | None = Field(
        None, description="folder of PNG stimuli; targets parsed from the file names (see naming)"
    )
    naming: Scheme = Field(
        "project", description="file-name scheme of images: project | pnas2020 (the PNAS 2020 release)"
    )
    invert: Inversion = Field("auto", description="greyscale stored dark-on-light (as displayed)? auto | true | false")
    manifests: list[str] = Field(
        default_factory=list, description="synthesis manifest.csv files; their accepted images"
    )
    include_rejected: bool = Field(False, description="also evaluate manifest rows below the acceptance threshold")
    batch_size: Count = Field(256, description="images per forward pass")
    data: ModelDataOptions = Field(default_factory=ModelDataOptions)

    _invert = field_validator("invert", mode="before")(lambda value: parse_inversion(value))

    @model_validator(mode="after")
    def _stimuli(self) -> EvaluateSettings:
        if self.images is None and not self.manifests:
            raise ValueError("no stimuli: pass images=FOLDER or manifests=[PATH,...]")
        return self


def _inversion(value: object) -> Inversion:
    """``invert=auto|true|false`` (Hydra reads true/false as booleans)."""
    text = str(value).lower()
    if text not in INVERSIONS:
        raise ValueError(f"invert={value!r}; allowed: {', '.join(INVERSIONS)}")
    return text  # type: ignore[return-value]


def run(cfg: EvaluateSettings, invocation: Invocation) -> Path:
    """Every model's responses to every stimulus, as ``model_responses.csv`` in ``invocation.out_dir``."""
    out = invocation.out_dir
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
