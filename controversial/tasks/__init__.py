"""Commands' tasks: each module declares its command's settings schema (composed of option groups that
live beside the code they configure) and ``run(settings, invocation)``; none touches Hydra."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, get_type_hints

from controversial.options import Options


@dataclass(frozen=True)
class Invocation:
    """Where a task writes and how it was called (for its records); the entry point fills it in."""

    out_dir: Path
    command: str = ""
    multirun: bool = False


def settings_schema(task: Callable[..., Any]) -> type[Options]:
    """The settings class a task's ``run`` takes: the annotation of its first parameter."""
    first = next(iter(inspect.signature(task).parameters))
    schema = get_type_hints(task)[first]
    if not (isinstance(schema, type) and issubclass(schema, Options)):
        raise TypeError(f"{task.__module__}.{task.__name__}: its first parameter must be annotated with Options")
    return schema


def command_names() -> list[str]:
    """Every command: each module of this package is one (``<name>.py`` at the top calls its ``run``)."""
    return sorted(module.name for module in pkgutil.iter_modules(__path__) if not module.name.startswith("_"))


def command_settings(name: str) -> type[Options]:
    """The settings schema of command ``name``."""
    return settings_schema(importlib.import_module(f"{__name__}.{name}").run)


def register_options(module: ModuleType) -> None:
    """Add the config groups a command composes from (the model names of ``model_a=``) before Hydra composes
    ``conf/<command>.yaml``: an optional ``register_options()`` beside the task's ``run``, which the entry point
    and ``controversial.api`` both call, so neither keeps a list of the commands that have one."""
    hook = getattr(module, "register_options", None)
    if hook is not None:
        hook()
