"""``python export_study.py sweep_dir=<dir> name=<study>``: sweep -> new study bundle version."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from controversial import __version__
from controversial.data import load_uint8
from controversial.settings import DesignStudySettings, ExportStudySettings, Invocation
from controversial.study.bundle import load_bundle
from controversial.study.export import DEFAULT_WEB_SOURCE, ExportSettings, export_study

log = logging.getLogger(__name__)


def _git_commit() -> str:
    """The repository commit the code runs from, for a bundle's provenance ("unknown" outside a checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def export_settings(
    cfg: ExportStudySettings | DesignStudySettings,
    invocation: Invocation,
    provenance: dict[str, Any] | None = None,
    **counts: int,
) -> ExportSettings:
    """The bundle settings both study commands take from their config (name, display, text, seed, sources)
    and their provenance; ``counts`` are the trial counts each command decides its own way."""
    return ExportSettings(
        name=cfg.name,
        n_demo=cfg.n_demo,
        display_size=cfg.display.size,
        resample=cfg.display.resample,
        invert_mnist=cfg.display.invert_mnist,
        seed=cfg.seed,
        sources=tuple(cfg.sources),
        title=cfg.title,
        attention_prompt=cfg.attention_prompt,
        pilot=cfg.pilot,
        provenance={
            "command": invocation.command,
            "code_version": __version__,
            "git_commit": _git_commit(),
            **(provenance or {}),
            "config": cfg.model_dump(),
        },
        **counts,
    )


def run(cfg: ExportStudySettings, invocation: Invocation) -> Path:
    """Select, render and write the bundle under ``cfg.studies_dir``; log where it went and how to serve it."""
    settings = export_settings(
        cfg,
        invocation,
        per_pair=cfg.per_pair,
        natural_per_class=cfg.natural_per_class,
        n_repeats=cfg.n_repeats,
        n_attention=cfg.n_attention,
    )

    def natural_loader(dataset: str) -> tuple[np.ndarray, np.ndarray]:
        images, labels = load_uint8(dataset, "test", cfg.data.root, cfg.data.download)
        return images.numpy(), labels.numpy()

    web_source = Path(cfg.web_source) if cfg.web_source else DEFAULT_WEB_SOURCE
    path = export_study(cfg.sweep_dir, cfg.studies_dir, settings, natural_loader, web_source)
    bundle = load_bundle(path)
    counts = bundle.spec.provenance["counts"]
    log.info(
        "study bundle %s: %d controversial + %d natural + %d repeats + %d attention checks = %d trials "
        "per participant (+%d practice)",
        path,
        counts["controversial"],
        counts["natural"],
        counts["repeats"],
        counts["attention"],
        sum(t.kind != "demo" for t in bundle.trials),
        counts["demo"],
    )
    log.info("serve it with: python serve_study.py study_dir=%s completion_code=<CODE from Prolific>", path)
    return path
