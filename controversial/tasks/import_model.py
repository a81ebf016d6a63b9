"""``python import_model.py``: a classifier trained elsewhere as a checkpoint every command uses by name."""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path

from pydantic import Field

from controversial.config import models_dirs
from controversial.tasks import Invocation
from controversial.zoo.checkpoints import read_checkpoint
from controversial.zoo.importing import ImportOptions, import_model
from controversial.zoo.model_card import write_model_card
from controversial.zoo.sources import TRUSTED_MODULES_ENV, module_trusted

log = logging.getLogger(__name__)


class ImportModelSettings(ImportOptions):
    """import_model.py: the model, its preprocessing and calibration (ImportOptions), and the model card."""

    update_model_card: bool = Field(True, description="regenerate <models_dir>/README.md")


def code_folder(source: str) -> Path | None:
    """The folder a ``python:`` source's module is imported from (what PYTHONPATH must hold); None for others."""
    kind, _, spec = source.partition(":")
    if kind != "python":
        return None
    top = sys.modules.get(spec.partition(":")[0].split(".")[0])
    file = getattr(top, "__file__", None)
    if file is None:
        return None
    path = Path(file).resolve()
    return path.parent.parent if path.name == "__init__.py" else path.parent


def python_module(source: str) -> str:
    """The module of a ``python:<module>:<callable>`` source; empty for the others."""
    kind, _, spec = source.partition(":")
    return spec.partition(":")[0] if kind == "python" else ""


def usage_hint(name: str, models_dir: Path, code: Path | None = None, module: str = "") -> str:
    """How to name the model in the other commands: a folder outside the searched ones needs the environment,
    and a ``python:`` source its module's folder on PYTHONPATH (the checkpoint stores weights, not code) and the
    module allowed (``zoo.sources.trusted_factory``: a model file runs no code the user did not allow)."""
    searched = [p.resolve() for p in models_dirs()]
    trust = f"{TRUSTED_MODULES_ENV}={module} " if module and not module_trusted(module) else ""
    python_path = trust + ("" if code is None else f"PYTHONPATH={shlex.quote(str(code))} ")
    models_env = "" if models_dir.resolve() in searched else f"CONTROVERSIAL_MODELS_DIR={shlex.quote(str(models_dir))} "
    evaluate_dir = "" if models_dir.resolve() in searched else f" models_dir={models_dir}"
    return (
        f"  {models_env}{python_path}python synthesize.py model_a={name} model_b=<another model of the dataset>\n"
        f"  {python_path}python evaluate.py models=[{name},...]{evaluate_dir} images=<folder>"
    )


def run(settings: ImportModelSettings, invocation: Invocation) -> Path:
    """Import the model; print its accuracy, calibration, file and the command that uses it."""
    path = import_model(settings, invocation.command)
    info, _ = read_checkpoint(path)
    models_dir = Path(settings.models_dir)
    if settings.update_model_card:
        log.info("model card: %s", write_model_card(models_dir))
    m, c = info.metrics, info.calibration
    print(
        f"{info.name} ({info.dataset}, {m['parameters']:,} parameters): test accuracy "
        f"{100 * m['test_accuracy']:.2f}% on {m['n_test']:,} test images"
        + (" (float16 weights, as stored)" if settings.float16 else "")
        + f"\ncalibration: {c.method}, slope {c.slope:.4g}, intercept {c.intercept:.4g}, fitted on "
        f"{m['calibrated_on']}; test NLL {m['test_nll_uncalibrated']:.4g} -> {m['test_nll_calibrated']:.4g}\n"
        f"preprocessing: {m['preprocessing']}\nweights: {m['weights']}\n"
        f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB) and {path.with_suffix('.yaml')}\n"
        f"use it:\n{usage_hint(info.name, models_dir, code_folder(settings.source), python_module(settings.source))}"
        + "".join(f"\nwarning: {w}" for w in m.get("warnings", []))
    )
    return path
