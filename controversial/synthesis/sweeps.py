"""Hydra glue for sweeps over model pairs: ``pair=<a>__<b>`` options and the unordered-pairs resolver.

A plain ``-m model_a=x,y model_b=x,y`` sweep is a cross product: it includes (a, a) and both
orders of every pair. An experiment instead lists its models once and sweeps
``pair=${unordered_pairs:${models}}``, i.e. the n(n-1)/2 unordered pairs in list order. Each
``pair`` option is a global package whose defaults override the ``model_a``/``model_b`` choices, so
``model_a.checkpoint=...`` overrides and the run dir name ``<a>_vs_<b>`` still work.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from controversial.errors import UserError

PAIR_SEPARATOR = "__"


def pair_option(model_a: str, model_b: str) -> str:
    return f"{model_a}{PAIR_SEPARATOR}{model_b}"


def unordered_pairs(models: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair of distinct models once, the earlier-listed model as model_a."""
    names = list(models)
    duplicates = sorted({m for m in names if names.count(m) > 1})
    if duplicates:
        raise UserError(f"models lists {', '.join(duplicates)} more than once; list each model once")
    return list(itertools.combinations(names, 2))


def _sweep_value(models: Sequence[str]) -> str:
    return ",".join(pair_option(a, b) for a, b in unordered_pairs(models))


def register_pair_options(model_datasets: Mapping[str, str]) -> None:
    """Store ``pair=<a>__<b>`` for every ordered pair of models of one dataset, and the ``unordered_pairs`` resolver."""
    store = ConfigStore.instance()
    for a, b in itertools.permutations(model_datasets, 2):
        if model_datasets[a] != model_datasets[b]:
            continue
        store.store(
            group="pair",
            name=pair_option(a, b),
            package="_global_",
            node={"defaults": [{"override /model_a": a}, {"override /model_b": b}]},
        )
    if not OmegaConf.has_resolver("unordered_pairs"):
        OmegaConf.register_new_resolver("unordered_pairs", _sweep_value)
