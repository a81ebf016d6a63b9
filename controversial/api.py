"""Every command from Python: ``run_command("synthesize", ["model_a=abs", "model_b=vgg"], "out")``.

The same composition and validation as ``python <command>.py`` (the schema's defaults, ``conf/``, the
overrides), then the task, writing into ``out_dir``; for notebooks and scripts that want a stage's
records without a shell. The library functions re-exported by :mod:`controversial` give finer control.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controversial.errors import UserError
from controversial.options import Options
from controversial.tasks import Invocation, command_names, command_settings, register_options


def _known(name: str) -> None:
    if name not in command_names():
        raise UserError(f"unknown command {name!r}; known: {', '.join(command_names())}")


def settings(name: str, overrides: Sequence[str] = ()) -> Options:
    """Command ``name``'s validated settings, composed as ``python <name>.py <overrides>`` would compose them."""
    from hydra.errors import HydraException

    from controversial.cli import error_message, load_settings

    _known(name)
    register_options(importlib.import_module(f"controversial.tasks.{name}"))  # the model names of model_a=
    try:
        return load_settings(name, command_settings(name), list(overrides))
    except HydraException as error:  # a typo or a bad override: the command line's message ("did you mean")
        raise UserError(error_message(error)) from None


def _with_out_dir(name: str, overrides: Sequence[str], out_dir: Path) -> list[str]:
    """A command whose output folder is a setting (``overview.py out_dir=``) writes into ``out_dir`` too, unless
    the overrides name it."""
    named = any(o.split("=", 1)[0].lstrip("+~") == "out_dir" for o in overrides)
    if "out_dir" in command_settings(name).model_fields and not named:
        return [*overrides, f"out_dir={out_dir}"]
    return list(overrides)


def run_command(name: str, overrides: Sequence[str] = (), out_dir: str | Path = ".", command: str | None = None) -> Any:
    """Run command ``name`` in this process, writing into ``out_dir``; returns what its task returns. ``command``
    is the command line its records keep (a checkpoint's, a bundle's provenance), by default
    ``python <name>.py <overrides>``."""
    _known(name)
    task = importlib.import_module(f"controversial.tasks.{name}")
    invocation = Invocation(Path(out_dir), " ".join([f"python {name}.py", *overrides]) if command is None else command)
    return task.run(settings(name, _with_out_dir(name, overrides, Path(out_dir))), invocation)
