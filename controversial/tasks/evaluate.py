"""``python evaluate.py``: model responses (PNAS model format) for a folder of stimuli or synthesis manifests."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from controversial.analysis.benchmark.decision_options import DecisionsOptions
from controversial.analysis.benchmark.model_decisions import labelled_images, write_decisions
from controversial.analysis.model_responses import (
    StimulusImage,
    implausible_accuracies,
    stimuli_from_folder,
    stimuli_from_manifest,
    write_responses,
)
from controversial.datasets import ModelDataOptions
from controversial.display_paths import shown
from controversial.errors import UserError
from controversial.options import Count, Options
from controversial.records.names import Scheme
from controversial.study.bundle import recorded_inversion
from controversial.synthesis.stimuli import INVERSIONS, Inversion, parse_inversion
from controversial.tasks import Invocation
from controversial.zoo.bundled import load_model, locate_model
from controversial.zoo.instances import instance_models

log = logging.getLogger(__name__)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class EvaluateSettings(Options):
    models: list[str] = Field(
        default_factory=list, min_length=1, description="trained model names (models/<dataset>/<name>.pt) or .pt paths"
    )
    dataset: str | None = Field(None, description="needed only when a model name exists for several datasets")
    models_dir: str | None = Field(
        None, description="searched first; the repository's models/ and your models folder always"
    )
    images: str | None = Field(
        None,
        description="folder of PNG stimuli; targets parsed from the file names (see naming); with "
        "decisions.enabled: one dataset's folder, or a folder of dataset folders (the benchmark's layout)",
    )
    naming: Scheme = Field(
        "project", description="file-name scheme of images: project | pnas2020 (the PNAS 2020 release)"
    )
    invert: Inversion = Field(
        "auto",
        description="greyscale stored dark-on-light (as displayed)? auto | true | false; a study bundle's stimuli/ "
        "follow its study.json, and a contradicting value is an error",
    )
    manifests: list[str] = Field(
        default_factory=list,
        description="synthesis manifest.csv files, or run/sweep folders (every run in them); their accepted images",
    )
    include_rejected: bool = Field(False, description="also evaluate manifest rows below the acceptance threshold")
    instances: bool = Field(
        False,
        description="each model as the mean of its trained instances (seeds), and each instance as <name>@<seed> "
        "(analyze.py then reports the spread between instances; docs/models.md, Instances)",
    )
    batch_size: Count = Field(256, description="images per forward pass")
    data: ModelDataOptions = Field(default_factory=ModelDataOptions)
    decisions: DecisionsOptions = Field(
        default_factory=DecisionsOptions, description="benchmark raw-data decisions on labelled images"
    )

    _invert = field_validator("invert", mode="before")(lambda value: parse_inversion(value))

    @model_validator(mode="after")
    def _stimuli(self) -> EvaluateSettings:
        if self.images is None and not self.manifests:
            raise UserError("no stimuli: pass images=FOLDER or manifests=[PATH,...]")
        if self.decisions.enabled and (self.images is None or self.manifests):
            raise UserError("decisions.enabled=true reads labelled images from images=FOLDER only (no manifests)")
        return self


def _inversion(value: object) -> Inversion:
    """``invert=auto|true|false`` (Hydra reads true/false as booleans)."""
    text = str(value).lower()
    if text not in INVERSIONS:
        raise UserError(f"invert={value!r}; allowed: {', '.join(INVERSIONS)}")
    return text  # type: ignore[return-value]


def _bundle_inversion(images: str | None, invert: Inversion) -> tuple[Inversion, str | None]:
    """A study bundle's ``stimuli/`` says how it is stored: use that (no guess), and refuse an ``invert=`` that
    contradicts it; anything else keeps ``invert`` as given."""
    recorded = recorded_inversion(images) if images is not None else None
    if recorded is None:
        return invert, None
    bundle = Path(images).resolve().parent  # type: ignore[arg-type]
    stored = "stored inverted (dark on light)" if recorded else "stored as the models see them"
    if invert != "auto" and (invert == "true") != recorded:
        raise UserError(
            f"invert={invert} contradicts {bundle / 'study.json'}: its stimuli/ are {stored} "
            f"(stimuli_invert={str(recorded).lower()}); drop invert= and the bundle's record is used"
        )
    return ("true" if recorded else "false"), f"{bundle.name} of study {bundle.parent.name}: stimuli/ {stored} " + (
        "(study.json), inverting them" if recorded else "(study.json), used as stored"
    )


def run(cfg: EvaluateSettings, invocation: Invocation) -> Path:
    """Every model's responses to every stimulus, as ``model_responses.csv`` in ``invocation.out_dir`` (with
    ``decisions.enabled``: each model's decisions as benchmark raw-data CSVs; returns their folder)."""
    out = invocation.out_dir
    if cfg.decisions.enabled:
        return _decisions(cfg, out)
    # the models first: the checkpoint of a model imported onto an image folder registers that dataset, whose
    # class names the stimuli's file names hold
    if cfg.instances:
        located = [(ref, locate_model(ref, cfg.dataset, cfg.models_dir)) for ref in cfg.models]
        models = [m for ref, path in located for m in instance_models(path, Path(ref).stem, cfg.data.root)]
    else:
        models = [load_model(ref, cfg.dataset, cfg.models_dir, cfg.data.root) for ref in cfg.models]
    stimuli: list[StimulusImage] = []
    if cfg.images is not None:
        stimuli += stimuli_from_folder(cfg.images, cfg.naming)
    for manifest in cfg.manifests:
        stimuli += stimuli_from_manifest(manifest, cfg.include_rejected)
    start = time.perf_counter()
    path = out / "model_responses.csv"
    invert, recorded = _bundle_inversion(cfg.images, _inversion(cfg.invert))
    p, convention = write_responses(path, models, stimuli, cfg.batch_size, invert)
    elapsed = time.perf_counter() - start
    print(f"display convention: {recorded or convention.note}")
    for line in implausible_accuracies(models, stimuli, p):
        log.warning(line)
        print(f"WARNING: {line}")
    print(f"{len(models)} models x {len(stimuli)} images -> {shown(path)} ({elapsed:.1f} s)")
    return path


def dataset_folders(images: str | Path, name: str | None) -> dict[str, Path]:
    """The datasets of ``images=``: the folder itself when it holds images (named ``name`` or after the folder),
    else each subfolder that holds images, as the benchmark's ``raw-data``-like tree of datasets."""
    folder = Path(images)
    if not folder.is_dir():
        raise UserError(f"images={images}: not a folder")
    if any(p.suffix.lower() in IMAGE_SUFFIXES for p in folder.iterdir()):
        return {name or folder.resolve().name: folder}
    found = {
        sub.name: sub
        for sub in sorted(folder.iterdir())
        if sub.is_dir() and any(p.suffix.lower() in IMAGE_SUFFIXES for p in sub.iterdir())
    }
    if not found:
        raise UserError(f"images={images}: no PNG or JPEG images in it or in its subfolders (one per dataset)")
    if name is not None:
        raise UserError(
            f"decisions.dataset={name} names one dataset, but images={images} holds {len(found)} dataset folders "
            f"({', '.join(found)}), each named after its folder: leave decisions.dataset out"
        )
    return found


def _decisions(cfg: EvaluateSettings, out: Path) -> Path:
    """Decisions on labelled images in the benchmark's raw-data format, one CSV per model and dataset: one
    dataset folder, or a folder of them (every dataset in one call, into ``out/<dataset>/``)."""
    assert cfg.images is not None  # checked by EvaluateSettings
    datasets = dataset_folders(cfg.images, cfg.decisions.dataset)
    models = [load_model(ref, cfg.dataset, cfg.models_dir, cfg.data.root) for ref in cfg.models]
    for dataset, folder in datasets.items():
        images = labelled_images(folder, cfg.decisions.label_pattern)
        start = time.perf_counter()
        paths, convention = write_decisions(
            out, models, images, dataset, cfg.decisions.readout, cfg.batch_size, _inversion(cfg.invert)
        )
        print(f"{dataset}: display convention: {convention.note}")
        seconds = time.perf_counter() - start
        print(f"{len(models)} models x {len(images)} images -> {shown(out / dataset)} ({seconds:.1f} s)")
    print(f"into the benchmark: python analyze.py 'choices=[<humans raw-data folder>,{out}]'")
    return out / next(iter(datasets)) if len(datasets) == 1 else out
