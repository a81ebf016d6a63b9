"""Shared fixtures: a small exported study bundle and a server app on a temporary SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep

from controversial.study.export import ExportOptions, export_study

SMALL = dict(per_pair=10, natural_per_class=1, n_repeats=3, n_attention=2, n_demo=1, display={"size": 56}, pilot=True)


@pytest.fixture(scope="session")
def small_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two model pairs x 10 stimuli + 10 natural + 3 repeats + 2 attention checks = 35 trials."""
    root = tmp_path_factory.mktemp("study")
    sweep = make_sweep(root / "sweep")
    return export_study(sweep, root / "studies", ExportOptions(name="pilot", **SMALL), fake_mnist_test, WEB_SOURCE)
