"""synthesize.py end to end, with tiny checkpoints standing in for the trained models."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_tiny_checkpoints

from controversial.records.manifest import MANIFEST_COLUMNS, read_manifest, without_timing

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # every test here runs the entry point in a subprocess


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = write_tiny_checkpoints(tmp_path_factory.mktemp("checkpoints"), ["abs", "vgg"], "mnist")
    return {name: folder / f"{name}.pt" for name in ("abs", "vgg")}


def _synthesize(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "synthesize.py", f"hydra.run.dir={run_dir}", "progress=false", *overrides]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _tiny(checkpoints: dict[str, Path]) -> list[str]:
    return [
        "model_a=abs",
        "model_b=vgg",
        f"model_a.checkpoint={checkpoints['abs']}",
        f"model_b.checkpoint={checkpoints['vgg']}",
        "synthesis.max_steps=25",
    ]


def test_full_matrix_outputs_and_byte_identical_reruns(tmp_path, tiny_checkpoints):
    first = _synthesize(tmp_path / "one", *_tiny(tiny_checkpoints))
    assert first.returncode == 0, first.stderr
    assert "/90 cells accepted at threshold 0.75" in first.stdout and "wall time" in first.stdout
    assert ", KID " in first.stdout and ", noise " in first.stdout  # the bundled MNIST feature network's
    rows = read_manifest(tmp_path / "one" / "manifest.csv")
    assert {(r.class_a, r.class_b) for r in rows} == {(a, b) for a in range(10) for b in range(10) if a != b}
    assert (tmp_path / "one" / "manifest.csv").read_text().splitlines()[0] == ",".join(MANIFEST_COLUMNS)
    pngs = sorted(p.name for p in (tmp_path / "one").glob("*.png") if p.name != "grid.png")
    assert pngs == sorted(r.image_file for r in rows)
    assert "abs_3_vs_vgg_7_seed0.png" in pngs
    assert (tmp_path / "one" / "grid.png").stat().st_size > 10_000
    for row in rows:
        assert row.accepted == (row.hard_score >= 0.75)

    second = _synthesize(tmp_path / "two", *_tiny(tiny_checkpoints))
    assert second.returncode == 0, second.stderr
    assert without_timing(read_manifest(tmp_path / "two" / "manifest.csv")) == without_timing(rows)
    for name in pngs:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def test_failed_cells_are_retried_with_new_seeds(tmp_path, tiny_checkpoints):
    result = _synthesize(
        tmp_path, *_tiny(tiny_checkpoints), "synthesis.threshold=0.9999", "max_attempts=2", "synthesis.max_steps=3"
    )
    assert result.returncode == 0, result.stderr
    rows = read_manifest(tmp_path / "manifest.csv")
    assert {r.seed for r in rows} == {0, 1}
    assert len(rows) == 180 and not any(r.accepted for r in rows)
    assert {r.status for r in rows} == {"below_threshold"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model_a=vgg", "model_b=vgg"], "a model cannot disagree with itself"),
        (["model_a=nope"], "Could not find 'model_a/nope'"),
        (
            ["model_a=abs", "model_b=vgg", "model_b.dataset=cifar10"],
            "controversial stimuli need two models of the same dataset",
        ),
        (["model_a=abs", "model_a.checkpoint=/nonexistent/abs.pt"], "Train it with `python train.py model=abs`"),
    ],
)
def test_bad_requests_get_one_paragraph_and_no_traceback(tmp_path, overrides, expected):
    result = _synthesize(tmp_path, *overrides)
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_default_output_folders_resolve_for_single_runs_and_sweeps(tmp_path, tiny_checkpoints):
    """No hydra.run.dir / sweep_dir given: the documented default folders (relative to the cwd) are used."""
    tiny = [
        *_tiny(tiny_checkpoints)[2:4],
        "synthesis.max_steps=2",
        "max_attempts=1",
        "progress=false",
        "wandb.mode=disabled",
    ]
    single = subprocess.run(
        [sys.executable, str(ROOT / "synthesize.py"), "model_a=abs", "model_b=vgg", *tiny],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    assert len(list((tmp_path / "outputs" / "synthesize" / "abs_vs_vgg").glob("*/manifest.csv"))) == 1
    sweep = subprocess.run(
        [sys.executable, str(ROOT / "synthesize.py"), "-m", "model_a=abs", "model_b=vgg", *tiny],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sweep.returncode == 0, sweep.stderr
    assert len(list((tmp_path / "multirun").glob("*/abs_vs_vgg/manifest.csv"))) == 1
