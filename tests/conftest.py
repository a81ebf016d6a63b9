"""Opt-in markers (slow, data, browser and cluster tests run locally only when asked, always in CI) and tiny models."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

from controversial.zoo.readout import CalibratedModel, Calibration
from controversial.zoo.registry import create_arch

OPT_IN_MARKERS = ("slow", "data", "browser", "cluster")
REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

os.environ.setdefault("WANDB_MODE", "disabled")  # tests never create wandb runs (tracking tests set it themselves)
# The per-user folder of imported models (platformdirs honours XDG_DATA_HOME on Linux): a fresh one per session, so
# tests neither see the user's own imported models nor leave theirs behind.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="controversial-tests-data-")
# Tiny models gain nothing from intra-op threads, and pytest-xdist already runs a worker per core: one thread per
# process (children too), and no OpenMP threads spinning while a test waits on a server or a subprocess.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
torch.set_num_threads(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    for marker in OPT_IN_MARKERS:
        parser.addoption(f"--run-{marker}", action="store_true", help=f"run tests marked @{marker}")
    parser.addoption("--run-all", action="store_true", help="run every opt-in test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_all = IN_CI or config.getoption("--run-all")
    for item in items:
        if "cluster" in item.keywords:  # one single-node SLURM per session: its tests share one xdist worker
            item.add_marker(pytest.mark.xdist_group("slurm"))
        for marker in OPT_IN_MARKERS:
            if marker in item.keywords and not (run_all or config.getoption(f"--run-{marker}")):
                item.add_marker(pytest.mark.skip(reason=f"opt-in: pass --run-{marker} (always on in CI)"))


def require_component(present: bool, what: str, how: str) -> None:
    """Skip a test whose optional component is missing, saying how to install it; in CI (which installs
    everything) a missing component fails the test instead, so CI never passes by skipping."""
    if present:
        return
    if IN_CI:
        pytest.fail(f"{what} missing in CI: {how}")
    pytest.skip(f"needs {what}: {how}")


@pytest.fixture
def web_assets() -> Path:
    """The web experiment's npm packages (jsPsych), which `pip install` does not bring."""
    vendor = REPO / "human_study" / "node_modules"
    require_component(
        (vendor / "jspsych" / "dist").is_dir(),
        "the web experiment's npm packages",
        "run `npm ci` in human_study/ (.ci/run does this)",
    )
    return vendor


@pytest.fixture
def chromium() -> Path:
    path = Path("/usr/bin/chromium")
    require_component(path.is_file(), "Chromium", "apt-get install -y chromium (.ci/run does this)")
    return path


# --- shared fixtures: tiny random models, so tests never need trained weights --------------------

MNIST_CLASSES = tuple(str(d) for d in range(10))


def make_tiny_model(seed: int, name: str | None = None, intercept: float = -1.0) -> CalibratedModel:
    net = create_arch("tiny_mlp", image_shape=(1, 28, 28), hidden=16, seed=seed)
    model = CalibratedModel(net, Calibration(1.0, intercept, "identity"), name or f"tiny{seed}", "mnist", MNIST_CLASSES)
    return model.eval().requires_grad_(False)


@pytest.fixture
def tiny_pair() -> list[CalibratedModel]:
    return [make_tiny_model(1), make_tiny_model(2)]
