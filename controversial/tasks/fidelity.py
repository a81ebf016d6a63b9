"""``python fidelity.py images=FOLDER``: how closely this project's models reproduce the PNAS 2020 models.

Reads a folder of the release's stimuli (``naming=pnas2020``), evaluates each of our models that stands in
for one of the paper's (``records.names.PNAS_MODELS``), and writes ``report.md`` and ``fidelity.csv``.
Models not trained yet are listed and left out, with the stimuli that need them.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from controversial.analysis.fidelity import model_fidelity, report_lines
from controversial.analysis.model_responses import load_images, probabilities, stimuli_from_folder
from controversial.atomic import atomic_write_text
from controversial.datasets import ModelDataOptions
from controversial.errors import UserError
from controversial.options import Count, Options
from controversial.records.fidelity import write_fidelity
from controversial.records.names import PNAS_MODELS, Scheme
from controversial.synthesis.stimuli import Inversion, parse_inversion
from controversial.tasks import Invocation
from controversial.tasks.evaluate import _inversion
from controversial.zoo.bundled import list_checkpoints, load_model

log = logging.getLogger(__name__)


class FidelitySettings(Options):
    images: str | None = Field(None, description="folder of the PNAS 2020 release's PNG stimuli, one experiment")
    naming: Scheme = Field("pnas2020", description="file-name scheme: project | pnas2020")
    models: list[str] | None = Field(
        None, description="our models to score; null: every model standing in for one of the paper's"
    )
    invert: Inversion = Field("auto", description="greyscale stored dark-on-light? auto | true | false")
    models_dir: str | None = Field(None, description="default: the repository's models/")
    batch_size: Count = Field(256, description="images per forward pass")
    data: ModelDataOptions = Field(default_factory=ModelDataOptions)

    _invert = field_validator("invert", mode="before")(lambda value: parse_inversion(value))

    @field_validator("models")
    @classmethod
    def _some(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise UserError("an empty list; name at least one model, or null for all")
        return value

    @model_validator(mode="after")
    def _stimuli(self) -> FidelitySettings:
        if self.images is None:
            raise UserError("no stimuli: pass images=FOLDER (e.g. the release's experiment_1 or experiment_2 images)")
        return self


def run(cfg: FidelitySettings, invocation: Invocation) -> Path:
    """Detection rates, hard scores and the agreement matrix into ``invocation.out_dir``."""
    out = invocation.out_dir
    folder = Path(str(cfg.images))
    try:
        stimuli = stimuli_from_folder(folder, cfg.naming)
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from None
    datasets = {s.name.dataset for s in stimuli if s.name is not None}
    if len(datasets) != 1:
        raise UserError(
            f"{folder}: images of {len(datasets)} datasets ({', '.join(sorted(datasets))}); "
            "score one experiment at a time"
        )
    dataset = datasets.pop()
    wanted = list(dict.fromkeys(cfg.models or PNAS_MODELS[dataset].values()))
    models_dir = cfg.models_dir
    trained = {
        name for name, paths in list_checkpoints(models_dir).items() if any(p.parent.name == dataset for p in paths)
    }
    available = [m for m in wanted if m in trained]
    absent = [m for m in wanted if m not in trained]
    if absent:
        message = (
            f"not trained yet for {dataset}: {', '.join(absent)} (no models/{dataset}/<name>.pt); "
            "scoring the others; stimuli that target a missing model get no hard score"
        )
        log.warning(message)
        print(message)
    if not available:
        raise UserError(f"none of {', '.join(wanted)} is trained for {dataset}; train one with train.py model=<name>")
    start = time.perf_counter()
    models = [load_model(name, dataset, models_dir, cfg.data.root) for name in available]
    images, convention = load_images(stimuli, _inversion(cfg.invert))
    p = probabilities(models, images, cfg.batch_size)
    fidelity = model_fidelity(stimuli, p, tuple(available), tuple(models[0].class_names), dataset)
    write_fidelity(out / "fidelity.csv", fidelity.rows)
    lines = report_lines(fidelity, str(folder), convention.note)
    atomic_write_text(out / "report.md", "\n".join(lines))
    print("\n".join(line for line in lines if line.startswith(("|", "- not"))))
    print(f"report: {out / 'report.md'}  per stimulus: {out / 'fidelity.csv'}  ({time.perf_counter() - start:.1f} s)")
    return out / "report.md"
