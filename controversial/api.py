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


def settings(name: str, overrides: Sequence[str] = ()) -> Options:
    """Command ``name``'s validated settings, composed as ``python <name>.py <overrides>`` would compose them."""
    from controversial.cli import load_settings

    if name not in command_names():
        raise UserError(f"unknown command {name!r}; known: {', '.join(command_names())}")
    register_options(importlib.import_module(f"controversial.tasks.{name}"))  # the model names of model_a=
    return load_settings(name, command_settings(name), list(overrides))


def run_command(name: str, overrides: Sequence[str] = (), out_dir: str | Path = ".", command: str | None = None) -> Any:
    """Run command ``name`` in this process, writing into ``out_dir``; returns what its task returns. ``command``
    is the command line its records keep (a checkpoint's, a bundle's provenance), by default
    ``python <name>.py <overrides>``."""
    task = importlib.import_module(f"controversial.tasks.{name}")
    invocation = Invocation(Path(out_dir), " ".join([f"python {name}.py", *overrides]) if command is None else command)
    return task.run(settings(name, overrides), invocation)
