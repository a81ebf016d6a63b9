"""``--help`` of every command, generated from its settings schema and its YAML defaults.

Each option is listed as ``key=default`` with its meaning and allowed values; model options list the
models of conf/model/ by dataset, and ``pair=`` only pairs of one dataset whose checkpoints exist.
"""

from __future__ import annotations

import itertools
import textwrap
import typing
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MultipleOf
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from controversial.config import CONF_DIR, load_model_config, model_config_files

WIDTH = 100


def usage_lines(name: str) -> list[str]:
    """The comment block at the top of conf/<name>.yaml: usage examples."""
    lines = []
    for line in (CONF_DIR / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").rstrip())
    return lines


def allowed_values(field: FieldInfo) -> str:
    """'one of a | b', '>= 1', '(0, 1]' ... from the field's type and constraints."""
    notes = []
    literal = _literal_args(field.annotation)
    if literal:
        notes.append("one of " + " | ".join(str(v) for v in literal))
    low = high = None
    for item in [*field.metadata, *_annotated_metadata(field.annotation)]:
        if isinstance(item, Ge):
            low = f"[{item.ge}"
        elif isinstance(item, Gt):
            low = f"({item.gt}"
        elif isinstance(item, Le):
            high = f"{item.le}]"
        elif isinstance(item, Lt):
            high = f"{item.lt})"
        elif isinstance(item, MultipleOf):
            notes.append(f"multiple of {item.multiple_of}")
    if low and high:
        notes.append(f"in {low}, {high}")
    elif low:
        notes.append((">= " if low[0] == "[" else "> ") + low[1:])
    elif high:
        notes.append(("<= " if high[-1] == "]" else "< ") + high[:-1])
    return "; ".join(notes)


def _literal_args(annotation: Any) -> tuple:
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    for arg in typing.get_args(annotation):
        found = _literal_args(arg)
        if found:
            return found
    return ()


def _annotated_metadata(annotation: Any) -> list:
    out = []
    for arg in typing.get_args(annotation):
        for item in getattr(arg, "__metadata__", ()):
            out += list(item.metadata) if isinstance(item, FieldInfo) else [item]
        out += _annotated_metadata(arg)
    return out


def _model_field(annotation: Any) -> type[BaseModel] | None:
    """The settings group of a field (a model, or a model or None); a list of models is one option."""
    if typing.get_origin(annotation) is list:
        return None
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def option_lines(schema: type[BaseModel], defaults: dict, prefix: str = "") -> list[str]:
    """``key=default`` and its meaning for every leaf of the schema."""
    from controversial.config import ModelOptions

    lines = []
    for key, field in schema.model_fields.items():
        name = prefix + (field.alias or key)
        value = defaults.get(field.alias or key) if isinstance(defaults, dict) else None
        nested = _model_field(field.annotation)
        if nested is ModelOptions:
            chosen = value.get("name") if isinstance(value, dict) else None
            lines += _entry(f"{name}={chosen}", f"{field.description}. Models: {models_by_dataset()}")
        elif nested is not None and nested.model_config.get("extra") == "allow":
            lines += option_lines_extra(nested, value or {}, name + ".")
        elif nested is not None:
            lines += option_lines(nested, value or {}, name + ".")
        else:
            allowed = allowed_values(field)
            lines += _entry(
                f"{name}={_format(value)}", (field.description or "") + (f" [{allowed}]" if allowed else "")
            )
    return lines


def option_lines_extra(schema: type[BaseModel], defaults: dict, prefix: str) -> list[str]:
    """Keys of an open mapping (e.g. the optimizer's keyword arguments) that the schema does not name."""
    named = {field.alias or key: field for key, field in schema.model_fields.items()}
    lines = []
    for key, field in named.items():
        allowed = allowed_values(field)
        lines += _entry(
            f"{prefix}{key}={_format(defaults.get(key))}",
            (field.description or "") + (f" [{allowed}]" if allowed else ""),
        )
    for key, value in defaults.items():
        if key not in named:
            lines += _entry(f"{prefix}{key}={_format(value)}", f"passed to {defaults.get('_target_', 'the class')}")
    return lines


def _entry(option: str, meaning: str) -> list[str]:
    body = textwrap.wrap(meaning, WIDTH - 8) or [""]
    return [f"  {option}", *[f"        {line}" for line in body]]


def _format(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_format(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{...}"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def model_datasets() -> dict[str, str]:
    """Model name -> dataset, from conf/model/."""
    return {path.stem: str(load_model_config(path).dataset) for path in model_config_files()}


def models_by_dataset() -> str:
    by: dict[str, list[str]] = {}
    for model, dataset in model_datasets().items():
        by.setdefault(dataset, []).append(model)
    return "; ".join(f"{dataset}: {', '.join(names)}" for dataset, names in by.items())


def trained_pairs() -> list[str]:
    """``a__b`` for models of one dataset that both have a checkpoint (as ``pair=`` takes them)."""
    from controversial.synthesis.sweeps import pair_option

    present = {}
    for path in model_config_files():
        node = load_model_config(path)
        if Path(str(node.checkpoint)).is_file():
            present[path.stem] = str(node.dataset)
    return [pair_option(a, b) for a, b in itertools.permutations(present, 2) if present[a] == present[b]]


def command_help(name: str, schema: type[BaseModel], overrides: list[str]) -> str:
    """The full help text of ``<name>.py`` (defaults as composed with the given overrides)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(name, overrides=overrides)
    defaults = {}
    for key in cfg:
        try:
            node = cfg[key]
            defaults[key] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except Exception:  # noqa: BLE001 - an unresolvable default (e.g. a required ???) is shown as such
            defaults[key] = "???"
    lines = [*usage_lines(name), "", "Options (key=default; override any with key=value):"]
    lines += option_lines(schema, defaults)
    if name == "synthesize":
        experiments = ", ".join(p.stem for p in sorted((CONF_DIR / "experiment").glob("*.yaml")))
        lines += _entry(
            "pair=<a>__<b>",
            "model_a and model_b at once (what experiments sweep over); trained "
            "pairs of one dataset: " + (", ".join(trained_pairs()) or "none"),
        )
        lines += _entry("experiment=<name>", f"an experiment's model list and sweep dir: {experiments}")
    lines += [
        "",
        (
            "Relative paths are relative to the working directory. Errors exit with status 2; set "
            "CONTROVERSIAL_DEBUG=1 for tracebacks. Hydra's own options: --hydra-help."
        ),
    ]
    return "\n".join(lines)
