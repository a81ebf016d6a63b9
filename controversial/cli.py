"""What every command shares: fair thread defaults, settings validated before any output, one error style, --help.

The entry points (``synthesize.py`` ...) are the only code that touches Hydra; each is
``command(name, task)``. Importing this module first sets the thread defaults, so it must
be imported before torch or numpy.
"""

from __future__ import annotations

# ruff: noqa: E402  (thread defaults are applied before torch and numpy are imported)
from controversial.threads import apply_thread_defaults

apply_thread_defaults()

import difflib
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import hydra
import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from controversial.config import CONF_DIR
from controversial.errors import UserError, one_paragraph
from controversial.help import command_help
from controversial.options import Options, defaults
from controversial.tasks import Invocation, register_options, settings_schema

log = logging.getLogger(__name__)

DEBUG_ENV = "CONTROVERSIAL_DEBUG"
EXIT_USER_ERROR, EXIT_INTERNAL_ERROR = 2, 1
STARTED = time.time()
S = TypeVar("S", bound=Options)

# Errors that describe the user's input or environment, shown as one paragraph (exit 2). The library raises
# UserError (a ValueError) for bad values and malformed files, naming the file, row and column; any other
# exception, a plain ValueError from a bug included, is an internal error with its traceback a switch away.
INPUT_ERRORS = (
    UserError,
    ValidationError,
    HydraException,
    OmegaConfBaseException,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    UnicodeError,
    yaml.YAMLError,  # a hand-edited config file; the message names the file, line and column
)


def validate(schema: type[S], cfg: DictConfig) -> S:
    """The composed config (Hydra's own node left out) as typed, range-checked settings."""
    values = {
        key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
        for key in cfg
        if key != "hydra" and not OmegaConf.is_missing(cfg, key)  # a missing value: the schema says it is required
    }
    return schema.model_validate(values)


def describe_validation_error(error: ValidationError) -> str:
    """Every invalid value in one sentence each: key=value: what is wrong."""
    parts = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"] if p not in ("function-after", "tagged-union"))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            parts.append(f"{key} is required")
        elif item["type"] == "extra_forbidden":
            parts.append(f"{key} is not a setting of this command (a typo?)")
        elif key:
            parts.append(f"{key}={_show(item.get('input'))}: {message}")
        else:
            parts.append(message)
    return "invalid settings: " + "; ".join(parts) + "."


def _show(value: Any) -> str:
    return "null" if value is None else (str(value) if not isinstance(value, dict) else "{...}")


def _unknown_setting(error: BaseException) -> str | None:
    """``modela=abs``: Hydra suggests ``+modela=abs``, which only fails later; name the setting it resembles."""
    cause = error.__cause__
    if not isinstance(cause, OmegaConfBaseException) or "is not in struct" not in str(cause):
        return None
    parent, key = getattr(cause, "parent_node", None), str(getattr(cause, "key", ""))
    known = [str(k) for k in parent.keys() if k != "hydra"] if parent is not None else []
    squashed = {k.replace("_", "").lower(): k for k in known}
    close = difflib.get_close_matches(key.replace("_", "").lower(), list(squashed), n=1, cutoff=0.75)
    name = cause.full_key or key
    if not close:
        return f"unknown setting '{name}'"
    suggestion = name[: -len(key)] + squashed[close[0]]
    value = re.search(r"use \+\S+?=(\S+)", str(error))
    return f"unknown setting '{name}'; did you mean {suggestion}" + (
        f" ({suggestion}={value.group(1)})?" if value else "?"
    )


def error_message(error: BaseException) -> str:
    if isinstance(error, ValidationError):
        text = describe_validation_error(error)
    elif isinstance(error, HydraException) and (unknown := _unknown_setting(error)):
        text = unknown
    elif isinstance(error, HydraException):
        text = str(error).split("Config search path:")[0]
        if isinstance(error.__cause__, OmegaConfBaseException):
            text += ": " + str(error.__cause__).splitlines()[0]
    elif isinstance(error, OSError) and error.filename and str(error.filename) not in str(error.strerror or ""):
        text = f"{error.strerror or error}: {error.filename}"
    elif isinstance(error, yaml.YAMLError):
        text = f"malformed YAML (quote a value that contains ': '): {error}"
    elif isinstance(error, OmegaConfBaseException) and "Missing mandatory value: " in str(error):
        key = str(error).split("Missing mandatory value: ")[-1].split()[0].rstrip(",")
        text = f"{key} is required: pass {key}=..."
    else:
        text = str(error)
    return one_paragraph(text)


def cluster_job_ended(error: BaseException) -> bool:
    """submitit's errors for a cluster job that ended without a result: cancelled, past its time limit more than
    ``max_num_timeout`` times, on a node that was lost, or failed in the task (its traceback follows)."""
    return type(error).__module__.startswith("submitit.") and type(error).__name__ in (
        "UncompletedJobError",
        "FailedJobError",
    )


def report(error: BaseException, name: str) -> int:
    """One paragraph on stderr; the traceback only with CONTROVERSIAL_DEBUG=1. Returns the exit code."""
    if cluster_job_ended(error):
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(
            f"error: a cluster job of this sweep ended without finishing its run: {first}. Its log files are named "
            f"below. Finished cells are kept: run the same command again to resume the sweep (docs/sweeps.md, "
            f"'Running on a real cluster').\n{error}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    if isinstance(error, INPUT_ERRORS):
        print(f"error: {error_message(error)} (`python {name}.py --help` lists every setting.)", file=sys.stderr)
        return EXIT_USER_ERROR
    print(
        f"internal error: {type(error).__name__}: {one_paragraph(str(error))}. This is a bug; run again with "
        f"{DEBUG_ENV}=1 for the traceback and report it.",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


def debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "").lower() in {"1", "true", "yes"}


def remove_fresh_run_dir(out_dir: Path) -> None:
    """After a failed run: remove its run dir if it holds nothing but Hydra's records made by this process,
    and the parent folders this process created (no output folder is left behind by an error)."""
    records = out_dir / ".hydra"
    if not out_dir.is_dir() or not records.is_dir() or records.stat().st_mtime < STARTED:
        return
    if any(p.name != ".hydra" and p.suffix != ".log" for p in out_dir.iterdir()):
        return
    shutil.rmtree(out_dir, ignore_errors=True)
    cwd, parent = Path.cwd().resolve(), out_dir.resolve().parent
    while parent != cwd and cwd in parent.parents and parent.stat().st_mtime >= STARTED and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def command_line(name: str, task_overrides: ListConfig) -> str:
    """``python <name>.py`` and the overrides as typed, for the run's records.

    The overrides are read unresolved: iterating the ListConfig would resolve every ``${...}`` in them
    inside Hydra's own node, so ``model_a.checkpoint=dir/${.name}.pt`` failed there ("Index 'name' (str)
    is not an int": ``.name`` relative to the list) and ``${model_b.name}`` was not found.
    """
    overrides = cast(list[str], OmegaConf.to_container(task_overrides, resolve=False))  # a ListConfig: a list
    return " ".join([f"python {name}.py", *overrides])


def register_defaults(name: str, schema: type[Options]) -> None:
    """Store the schema's defaults as ``<name>_defaults``, the base node ``conf/<name>.yaml`` composes first:
    the schema is the one place a default is written."""
    ConfigStore.instance().store(name=f"{name}_defaults", node=defaults(schema))


def command(name: str, task: Callable[[S, Invocation], Any]) -> Callable[[], None]:
    """The ``main()`` of ``<name>.py``: ``--help`` from the task's settings schema, validation, the task, and
    error reporting. Before Hydra starts it calls the task module's optional hooks: ``before_hydra(argv)`` (checks
    of the command line itself) and ``register_options()`` (config groups: the model names of ``model_a=``)."""

    schema = cast(type[S], settings_schema(task))  # the annotation of the task's first parameter: S
    module = sys.modules[task.__module__]  # where its hooks live, beside run
    failures: list[BaseException] = []
    launcher_pid = [os.getpid()]  # main() sets it; a job in another process (SLURM, joblib) carries a copy

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=name)
    def hydra_main(cfg: DictConfig) -> Any:
        hydra_cfg = HydraConfig.get()
        multirun = hydra_cfg.mode == RunMode.MULTIRUN
        out_dir = Path(hydra_cfg.runtime.output_dir)
        overrides = hydra_cfg.overrides.task  # typed list[str] by HydraConf; a ListConfig at run time
        invocation = Invocation(out_dir, command_line(name, overrides), multirun)  # type: ignore[arg-type]
        try:
            return task(validate(schema, cfg), invocation)
        except Exception as error:  # reported by main(); raised here, Hydra would log it with a traceback first
            remove_fresh_run_dir(out_dir)
            if debugging():
                raise
            if multirun and isinstance(error, INPUT_ERRORS):
                log.error("%s: job skipped: %s", out_dir.name, error_message(error))
                print(f"error: {out_dir.name} skipped, the sweep goes on: {error_message(error)}", file=sys.stderr)
                return None
            if os.getpid() != launcher_pid[0]:
                raise  # a job in a launcher's worker (a SLURM job): only a raised error reaches the launcher
            log.debug("%s failed", name, exc_info=True)  # the traceback stays in the run's log file, if any
            failures.append(error)
            return None

    def main() -> None:
        register_defaults(name, schema)
        try:
            if (before_hydra := getattr(module, "before_hydra", None)) is not None:
                before_hydra(sys.argv[1:])
            register_options(module)  # reads model files: a malformed or clashing one is the user's to fix
        except INPUT_ERRORS as error:
            if debugging():
                raise
            raise SystemExit(report(error, name)) from None
        if any(arg in ("--help", "-h") for arg in sys.argv[1:]):
            print(command_help(name, schema, [a for a in sys.argv[1:] if a not in ("--help", "-h")]))
            return
        os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises; this handler decides what is shown
        launcher_pid[0] = os.getpid()
        try:
            hydra_main()
        except Exception as error:  # Hydra's own errors: unknown option, bad override syntax, missing value
            if debugging():
                raise
            failures.append(error)
        if failures:
            raise SystemExit(report(failures[0], name))

    return main


def load_settings(name: str, schema: type[S], overrides: list[str] | None = None) -> S:
    """Compose ``conf/<name>.yaml`` with overrides and validate it, as the command would (tests, notebooks)."""
    from hydra import compose, initialize_config_dir

    register_defaults(name, schema)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(name, overrides=list(overrides or []))
    return validate(schema, cfg)
