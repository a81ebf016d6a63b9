"""Sweeps through a real SLURM cluster (``hydra/launcher=slurm``): the same result as on this machine, and
resumed after the faults a cluster has: a cancelled job, a job at its time limit, a node that disappears.

The sweeps are of tiny random models (abs vs vgg and pcn vs vgg, or abs vs vgg alone for the faults) with
settings under which most cells fail, so that each pair runs eight attempts of 400 steps and rewrites its
manifest after each: a fault lands between two attempts. The SLURM job runs this checkout (``PYTHONPATH``, cwd) with
``sys.executable``, as submitit pickles it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import write_tiny_checkpoints

from controversial.records.manifest import read_manifest, without_timing

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ("abs_vs_vgg", "pcn_vs_vgg")
FAULTY = PAIRS[:1]  # the fault tests sweep one pair: a single job, half the CPU of two
SETTINGS = (
    "model_b=vgg",
    "synthesis.max_steps=400",
    "synthesis.stop_score=null",
    "synthesis.threshold=0.99",
    "synthesis.tolerance_levels=0",
    "max_attempts=8",
    "retry_lookahead=false",
    "progress=false",
    "wandb.mode=disabled",
)


def _slurm(submitit: Path, timeout_min: int = 5, max_num_timeout: int = 3) -> list[str]:
    """The test cluster's overrides of conf/hydra/launcher/slurm.yaml (a CPU partition, small jobs)."""
    return [
        "hydra/launcher=slurm",
        "hydra.launcher.partition=tests",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        f"hydra.launcher.timeout_min={timeout_min}",
        f"hydra.launcher.max_num_timeout={max_num_timeout}",
        f"hydra.launcher.submitit_folder={submitit}/%j",
    ]


def _command(checkpoints: Path, sweep_dir: Path, *extra: str, pairs: tuple[str, ...] = PAIRS) -> list[str]:
    """``python synthesize.py -m`` over ``pairs`` (each ``<a>_vs_vgg``) with the tiny checkpoints."""
    return [
        sys.executable,
        "synthesize.py",
        "-m",
        "model_a=" + ",".join(pair.split("_vs_")[0] for pair in pairs),
        *SETTINGS,
        f"model_a.checkpoint={checkpoints}/${{.name}}.pt",
        f"model_b.checkpoint={checkpoints}/${{.name}}.pt",
        f"sweep_dir={sweep_dir}",
        *extra,
    ]


def _env(base: dict[str, str] | None = None) -> dict[str, str]:
    return {**(base or os.environ), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _sweep(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """The sweep's launcher process in the background, its output in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _finish(process: subprocess.Popen, log: Path, timeout: float = 240) -> str:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return log.read_text()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(poll)


def _rows(sweep_dir: Path, pair: str) -> int:
    path = sweep_dir / pair / "manifest.csv"
    return len(read_manifest(path)) if path.is_file() else 0


def _job_id(submitit: Path, index: int | None = None) -> str:
    """The SLURM id of array task ``index`` (``<array job>_<index>``), or of the one job of a one-pair sweep
    (submitit submits no array for it), from the folder submitit keeps for it."""
    pattern = f"{'*' if index is None else f'*_{index}'}/*_submitted.pkl"
    _wait_for(lambda: any(submitit.glob(pattern)), f"{pattern} to be written at submission")
    return next(submitit.glob(pattern)).parent.name


def _job_field(cluster, job: str, name: str) -> str:
    shown = cluster.run("scontrol", "--oneliner", "show", "job", job)
    return re.search(rf"\b{name}=(\S*)", shown).group(1)


def assert_same_as_local(sweep_dir: Path, reference: Path, pairs: tuple[str, ...] = PAIRS) -> None:
    """Every pair's manifest equals the local sweep's (the wall-time column aside), each (cell, seed) once, and
    every PNG (stimuli and grid) is byte-identical; nothing is left over (no stray PNG, no temp file)."""
    assert sorted(p.name for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) == list(pairs)
    for pair in pairs:
        rows, expected = (
            read_manifest(sweep_dir / pair / "manifest.csv"),
            read_manifest(reference / pair / "manifest.csv"),
        )
        assert without_timing(rows) == without_timing(expected), pair
        assert len({(r.cell, r.seed) for r in rows}) == len(rows), f"{pair}: a (cell, seed) twice"
        pngs = sorted(p.name for p in (sweep_dir / pair).glob("*.png"))
        assert pngs == sorted(p.name for p in (reference / pair).glob("*.png")), pair
        for name in pngs:
            assert (sweep_dir / pair / name).read_bytes() == (reference / pair / name).read_bytes(), f"{pair}/{name}"
        assert not list((sweep_dir / pair).glob(".*.tmp"))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    return write_tiny_checkpoints(tmp_path_factory.mktemp("checkpoints"), ["abs", "pcn", "vgg"], "mnist")


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory, checkpoints) -> tuple[Path, float]:
    """The sweep with Hydra's basic launcher on this machine: the reference, and its wall time."""
    sweep_dir = tmp_path_factory.mktemp("local") / "sweep"
    start = time.monotonic()
    result = subprocess.run(
        _command(checkpoints, sweep_dir), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    for pair in PAIRS:
        assert 90 * 2 < _rows(sweep_dir, pair), "the settings should leave cells to retry"
    return sweep_dir, time.monotonic() - start


def test_a_sweep_submitted_to_slurm_as_an_array_gives_the_local_result(
    slurm_cluster, local_sweep, checkpoints, tmp_path
):
    reference, local_seconds = local_sweep
    sweep_dir, submitit = tmp_path / "sweep", tmp_path / "submitit"
    start = time.monotonic()
    log = tmp_path / "launcher.log"
    output = _finish(_sweep(_command(checkpoints, sweep_dir, *_slurm(submitit)), _env(slurm_cluster.env), log), log)
    slurm_seconds = time.monotonic() - start
    assert "Submitit 'slurm' sweep output dir" in output, output
    assert_same_as_local(sweep_dir, reference)

    tasks = [_job_id(submitit, i) for i in range(len(PAIRS))]
    assert len({task.split("_")[0] for task in tasks}) == 1, f"one array job: {tasks}"
    assert {_job_field(slurm_cluster, task, "JobName") for task in tasks} == {"synthesize"}
    waits = []
    for task in tasks:
        # submitit writes the result before the job's process exits; SLURM then marks it done
        _wait_for(lambda: _job_field(slurm_cluster, task, "JobState") == "COMPLETED", f"{task} to complete", 30, 0.5)
        submitted, started = (_job_field(slurm_cluster, task, f) for f in ("SubmitTime", "StartTime"))
        waits.append(
            time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S"))
            - time.mktime(time.strptime(submitted, "%Y-%m-%dT%H:%M:%S"))
        )
    print(
        f"\nlocal sweep {local_seconds:.1f} s (sequential); SLURM sweep {slurm_seconds:.1f} s "
        f"(array of {len(tasks)}, one CPU each); submit -> start per job: {', '.join(f'{w:.0f} s' for w in waits)}"
    )


def _start_faulty_sweep(cluster, checkpoints: Path, tmp_path: Path, **launcher) -> tuple[subprocess.Popen, Path, str]:
    """A sweep of abs vs vgg on the cluster, returned once its job has written two attempts (of eight)."""
    sweep_dir, submitit = tmp_path / "sweep", tmp_path / "submitit"
    command = _command(checkpoints, sweep_dir, *_slurm(submitit, **launcher), pairs=FAULTY)
    launcher_process = _sweep(command, _env(cluster.env), tmp_path / "first.log")
    _wait_for(lambda: _rows(sweep_dir, PAIRS[0]) > 90, "abs vs vgg to write its second attempt")
    return launcher_process, sweep_dir, _job_id(submitit)


def _resubmit(cluster, checkpoints: Path, sweep_dir: Path, tmp_path: Path) -> str:
    """The same command again, as a user re-runs a sweep; its output."""
    command = _command(checkpoints, sweep_dir, *_slurm(tmp_path / "submitit"), pairs=FAULTY)
    log = tmp_path / "second.log"
    output = _finish(_sweep(command, _env(cluster.env), log), log)
    assert "error" not in output.lower(), output
    return output


def test_a_job_cancelled_mid_pair_and_resubmitted_resumes_it(slurm_cluster, local_sweep, checkpoints, tmp_path):
    reference, _ = local_sweep
    launcher, sweep_dir, task = _start_faulty_sweep(slurm_cluster, checkpoints, tmp_path)
    slurm_cluster.run("scancel", task)
    slurm_cluster.kill_tasks()  # the SIGKILL that follows a cancel's SIGTERM (see kill_tasks)
    output = _finish(launcher, tmp_path / "first.log")
    assert launcher.returncode == 1, output
    assert "error: a cluster job of this sweep ended without finishing its run" in output, output
    assert "(state: CANCELLED" in output and "run the same command again to resume the sweep" in output
    kept, expected = _rows(sweep_dir, PAIRS[0]), _rows(reference, PAIRS[0])
    assert 90 < kept < expected, "the job was cancelled between its first and last attempt"

    _resubmit(slurm_cluster, checkpoints, sweep_dir, tmp_path)
    assert f"resuming {sweep_dir / PAIRS[0]}: {kept} earlier row(s)" in (sweep_dir / PAIRS[0] / "cli.log").read_text()
    assert_same_as_local(sweep_dir, reference, FAULTY)
    print(f"\ncancelled with {kept}/{expected} rows of {PAIRS[0]} written; the re-run added {expected - kept}")


def test_a_job_at_its_time_limit_is_requeued_by_submitit_and_finishes(
    slurm_cluster, local_sweep, checkpoints, tmp_path
):
    reference, _ = local_sweep
    launcher, sweep_dir, task = _start_faulty_sweep(slurm_cluster, checkpoints, tmp_path, max_num_timeout=1)
    # what SLURM sends signal_delay_s before the time limit (sbatch --signal=USR2@...); with timeout_min
    # under 10, submitit counts it as a timeout, checkpoints the job and requeues it
    slurm_cluster.run("scancel", "--signal=USR2", task)
    kept = _rows(sweep_dir, PAIRS[0])
    output = _finish(launcher, tmp_path / "first.log")
    assert launcher.returncode == 0, output
    assert _job_field(slurm_cluster, task, "Restarts") == "1"
    job_log = next((tmp_path / "submitit").glob(f"{task}/*_log.out")).read_text()
    assert "this job is timed-out" in job_log and f"Requeued job {task} (0 remaining timeouts)" in job_log, job_log
    assert f"resuming {sweep_dir / PAIRS[0]}: " in (sweep_dir / PAIRS[0] / "cli.log").read_text()
    assert_same_as_local(sweep_dir, reference, FAULTY)
    print(f"\nrequeued with about {kept}/{_rows(reference, PAIRS[0])} rows of {PAIRS[0]} written")


def test_a_lost_node_leaves_its_jobs_requeued_and_the_sweep_completes_when_it_returns(
    slurm_cluster, local_sweep, checkpoints, tmp_path
):
    reference, _ = local_sweep
    launcher, sweep_dir, task = _start_faulty_sweep(slurm_cluster, checkpoints, tmp_path)
    slurm_cluster.stop_node()
    kept = _rows(sweep_dir, PAIRS[0])
    try:
        _wait_for(lambda: "down" in slurm_cluster.node_state(), "slurmctld to mark the node down", 60, 0.5)
        node = slurm_cluster.run("sinfo", "--noheader", "--Node", "--format=%T %E").strip()
        jobs = slurm_cluster.run("squeue", "--noheader", "--format=%i %T %r").strip()
        print(f"\nnode lost with {kept} rows of {PAIRS[0]} written; sinfo: {node}; squeue: {jobs}")
        # requeued: pending, until its requeue delay is over (reason BeginTime) and a node is up (reason None)
        assert node == "down* Not responding" and jobs.startswith(f"{task} PENDING "), "SLURM requeued the job"
        assert launcher.poll() is None, "the launcher waits for the requeued job"
    finally:
        slurm_cluster.start_slurmd()
    output = _finish(launcher, tmp_path / "first.log")
    assert launcher.returncode == 0, output
    assert f"resuming {sweep_dir / PAIRS[0]}: {kept} earlier row(s)" in (sweep_dir / PAIRS[0] / "cli.log").read_text()
    assert_same_as_local(sweep_dir, reference, FAULTY)


def test_an_internal_error_in_a_slurm_job_fails_the_sweep(slurm_cluster, tmp_path):
    """A corrupt checkpoint is an internal error of that pair's job; Hydra hands it back to the launcher, which
    reports it as a local sweep does (before, the job swallowed it and the sweep exited 0)."""
    folder = write_tiny_checkpoints(tmp_path / "checkpoints", ["pcn", "vgg"], "mnist")
    (folder / "pcn.pt").write_bytes(b"not a checkpoint")
    command = _command(folder, tmp_path / "sweep", *_slurm(tmp_path / "submitit"), pairs=("pcn_vs_vgg",))
    log = tmp_path / "launcher.log"
    launcher = _sweep(command, _env(slurm_cluster.env), log)
    output = _finish(launcher, log)
    assert launcher.returncode == 1, output
    assert "internal error: UnpicklingError" in output, output
