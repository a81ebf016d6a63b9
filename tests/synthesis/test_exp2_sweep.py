"""Experiment 2: every pair of the CIFAR-10 models in two replications that never share a run dir or a seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import compose_synthesize, run_task, write_tiny_checkpoints
from omegaconf import OmegaConf

from controversial.errors import UserError
from controversial.records.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[2]
SEVEN = ["vgg16", "wrn", "pcn_cifar10", "robust_linf", "robust_l2", "kde_cifar10", "jem"]  # the paper's, its order


def test_exp2_sweeps_every_pair_twice_with_the_seed_in_the_run_dir():
    cfg = compose_synthesize("experiment=exp2_cifar10")
    assert list(cfg.models) == SEVEN and cfg.hydra.sweep.dir == "multirun/exp2_cifar10"
    pairs = cfg.hydra.sweeper.params.pair.split(",")
    assert len(pairs) == 21 == len({frozenset(p.split("__")) for p in pairs})
    assert cfg.hydra.sweeper.params.seed == "0,1000"
    subdir = OmegaConf.to_container(cfg.hydra.sweep)["subdir"]  # resolved per job, where hydra:runtime exists
    assert subdir == "seed_${seed}/${hydra:runtime.choices.model_a}_vs_${hydra:runtime.choices.model_b}"


@pytest.fixture(scope="module")
def tiny_cifar_checkpoints(tmp_path_factory) -> Path:
    return write_tiny_checkpoints(tmp_path_factory.mktemp("cifar_checkpoints"), ["vgg16", "wrn"], "cifar10")


@pytest.mark.slow
def test_two_replications_write_separate_dirs_with_disjoint_seeds_and_each_has_an_overview(
    tmp_path, tiny_cifar_checkpoints
):
    checkpoints = [f"model_{m}.checkpoint={tiny_cifar_checkpoints}/${{.name}}.pt" for m in "ab"]
    command = [
        sys.executable,
        "synthesize.py",
        "-m",
        "experiment=exp2_cifar10",
        "models=[vgg16,wrn]",
        f"sweep_dir={tmp_path}",
        "synthesis.max_steps=3",
        "max_attempts=2",
        "progress=false",
        "wandb.mode=disabled",
        *checkpoints,
    ]
    result = subprocess.run(
        command,
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    seeds = {}
    for replication in ("seed_0", "seed_1000"):
        rows = read_manifest(tmp_path / replication / "vgg16_vs_wrn" / "manifest.csv")
        assert {(r.class_a, r.class_b) for r in rows} == {(a, b) for a in range(10) for b in range(10) if a != b}
        seeds[replication] = {r.seed for r in rows}
    assert seeds["seed_0"] <= {0, 1} and seeds["seed_1000"] <= {1000, 1001}

    def overview(sweep_dir: Path) -> None:
        run_task(
            "overview", [f"sweep_dir={sweep_dir}", "fig2_class_pairs=[[3,5]]", "progress=false"], sweep_dir / "overview"
        )

    with pytest.raises(UserError, match="replications seed_0, seed_1000.*sweep_dir=.*seed_0"):
        overview(tmp_path)
    overview(tmp_path / "seed_1000")
    table = (tmp_path / "seed_1000" / "overview" / "acceptance.md").read_text()
    assert table.splitlines()[0] == "| | vgg16 | wrn |"  # the experiment's model order, from the sweep's record
