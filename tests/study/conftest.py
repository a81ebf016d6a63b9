"""Shared fixtures: a small exported study bundle, and the database a test stores answers in.

``database_url`` is a fresh SQLite file, or, when ``STUDY_TEST_DATABASE_URL`` is set (``.ci/run`` sets it to a
throwaway PostgreSQL 15 cluster, ``.ci/postgres.sh``), that database emptied. Every test that asks for it is
marked ``database`` here, so ``pytest -m database`` runs exactly the database-backed tests on that server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep
from sqlalchemy import create_engine

from controversial.study.db import Base
from controversial.study.export import ExportOptions, export_study

from .production_app import make_app

SMALL = dict(per_pair=10, natural_per_class=1, n_repeats=3, n_attention=2, n_demo=1, display={"size": 56}, pilot=True)


def one_pair_pilot(tmp_path: Path, name: str, **display) -> Path:
    """A pilot bundle of one pair (abs vs vgg): 10 stimuli + 10 natural + 2 repeats + 1 attention check + 1 demo,
    shown as ``display`` says (the default display when empty): what a browser test walks through."""
    options = ExportOptions(
        name=name, per_pair=10, natural_per_class=1, n_repeats=2, n_attention=1, n_demo=1, pilot=True, display=display
    )
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    return export_study(sweep, tmp_path / "studies", options, fake_mnist_test, WEB_SOURCE)


@pytest.fixture(scope="session")
def small_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two model pairs x 10 stimuli + 10 natural + 3 repeats + 2 attention checks = 35 trials."""
    root = tmp_path_factory.mktemp("study")
    sweep = make_sweep(root / "sweep")
    return export_study(sweep, root / "studies", ExportOptions(name="pilot", **SMALL), fake_mnist_test, WEB_SOURCE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "database_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.database)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """A fresh SQLite file, or the database named by STUDY_TEST_DATABASE_URL (e.g. PostgreSQL), emptied."""
    url = os.environ.get("STUDY_TEST_DATABASE_URL")
    if not url:
        return f"sqlite:///{tmp_path / 'responses.db'}"
    engine = create_engine(url)
    Base.metadata.drop_all(engine)
    engine.dispose()
    return url


@pytest.fixture
def app(small_bundle: Path, tmp_path: Path) -> Iterator[FastAPI]:
    """The app with production settings (``production_app.make_app``), its database closed afterwards."""
    app = make_app(small_bundle, tmp_path)
    yield app
    app.state.engine.dispose()


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """A client of ``app`` that sees a server error as the 500 a browser would get."""
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
