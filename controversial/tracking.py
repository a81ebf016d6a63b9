"""Experiment tracking with Weights & Biases, optional and side-effect free for results.

``wandb`` is imported only when tracking is on. ``offline`` (the default) writes the run under
``<run dir>/wandb`` and needs no account or network (``wandb sync`` uploads it later);
``online`` needs a login; ``disabled`` (tests) does nothing. Trackers only read values the
synthesis has already computed, so logging cannot change a manifest.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import Field

from controversial.errors import UserError
from controversial.options import Options

log = logging.getLogger(__name__)

Mode = Literal["disabled", "offline", "online"]
MODES: tuple[Mode, ...] = ("disabled", "offline", "online")


class Tracker:
    """The do-nothing tracker used when ``wandb.mode=disabled``."""

    enabled = False

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def summary(self, values: dict[str, Any]) -> None:
        pass

    def log_image(self, key: str, path: Path) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbTracker(Tracker):
    enabled = True

    def __init__(self, run: Any, wandb_module: Any) -> None:
        self._run = run
        self._wandb = wandb_module

    def log(self, metrics: dict[str, float], step: int | None = None) -> None:
        self._run.log(metrics, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        self._run.summary.update(values)

    def log_image(self, key: str, path: Path) -> None:
        self._run.log({key: self._wandb.Image(str(path))})

    def finish(self) -> None:
        self._run.finish()


def start_tracking(
    mode: Mode,
    project: str,
    run_dir: Path,
    run_name: str,
    group: str | None = None,
    config: dict[str, Any] | None = None,
) -> Tracker:
    """A tracker for one run; offline runs live in ``run_dir/wandb``."""
    if mode not in MODES:
        raise UserError(f"wandb.mode={mode!r} is not known; allowed: {', '.join(MODES)}")
    if mode == "disabled":
        return Tracker()
    import wandb  # lazily: importing wandb costs about a second and it is never required

    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        run = wandb.init(
            mode=mode,
            project=project,
            name=run_name,
            group=group,
            dir=str(run_dir),
            config=config,
            settings=wandb.Settings(silent=True),
        )
    except Exception as error:  # noqa: BLE001 -- wandb raises several types for login/network problems
        raise UserError(
            f"wandb.mode={mode} could not start ({type(error).__name__}: {error}); "
            "use wandb.mode=offline (no account needed) or wandb.mode=disabled"
        ) from None
    log.info("wandb %s run %s in %s", mode, run_name, run.dir)
    return WandbTracker(run, wandb)


def _default_wandb_mode() -> Mode:
    # Not checked here: the command validates the composed settings, and start_tracking refuses an unknown mode.
    return cast(Mode, os.environ.get("WANDB_MODE", "offline"))


class WandbOptions(Options):
    """Experiment tracking; never required, offline (no network) unless asked."""

    mode: Mode = Field(
        default_factory=_default_wandb_mode,
        description="offline: <run dir>/wandb, no network; online; disabled (default: $WANDB_MODE, else offline)",
    )
    project: str = Field("controversial", description="wandb project")
    group: str | None = Field(None, description="groups a sweep's runs (experiments set it)")
