"""``python export_study.py sweep_dir=<dir> name=<study>``: sweep -> new study bundle version."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from controversial import __version__
from controversial.data import load_uint8
from controversial.datasets import DataOptions
from controversial.options import Options
from controversial.study.bundle import load_bundle
from controversial.study.export import DEFAULT_WEB_SOURCE, ExportOptions, export_study
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


class ExportStudySettings(ExportOptions):
    """export_study.py: the paper's selection (20 per model pair) from a sweep, as a study bundle."""

    sweep_dir: str = Field(description="a synthesize run dir or sweep (every */manifest.csv below it is read)")
    data: DataOptions = Field(default_factory=lambda: DataOptions(download=False))


def _git_commit() -> str:
    """The repository commit the code runs from, for a bundle's provenance ("unknown" outside a checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def bundle_provenance(settings: Options, invocation: Invocation, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """How a bundle was made, for its study.json: the command, the code and the whole settings."""
    return {
        "command": invocation.command,
        "code_version": __version__,
        "git_commit": _git_commit(),
        **(extra or {}),
        "config": settings.model_dump(),
    }


def run(cfg: ExportStudySettings, invocation: Invocation) -> Path:
    """Select, render and write the bundle under ``cfg.studies_dir``; log where it went and how to serve it."""

    def natural_loader(dataset: str) -> tuple[np.ndarray, np.ndarray]:
        images, labels = load_uint8(dataset, "test", cfg.data.root, cfg.data.download)
        return images.numpy(), labels.numpy()

    web_source = Path(cfg.web_source) if cfg.web_source else DEFAULT_WEB_SOURCE
    path = export_study(
        cfg.sweep_dir, cfg.studies_dir, cfg, natural_loader, web_source, bundle_provenance(cfg, invocation)
    )
    bundle = load_bundle(path)
    counts = bundle.spec.provenance["counts"]
    log.info(
        "study bundle %s: %d controversial + %d natural + %d repeats + %d attention checks = %d trials "
        "per participant (+%d practice), about %d min",
        path,
        counts["controversial"],
        counts["natural"],
        counts["repeats"],
        counts["attention"],
        sum(t.kind != "demo" for t in bundle.trials),
        counts["demo"],
        bundle.spec.provenance["duration"]["minutes"],
    )
    log.info("serve it with: python serve_study.py study_dir=%s completion_code=<CODE from Prolific>", path)
    return path
