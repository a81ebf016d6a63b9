"""Sweeps: unordered model pairs, launcher configs, and resumable run dirs (incl. kill -9)."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import compose_synthesize, write_tiny_checkpoints
from omegaconf import OmegaConf

from controversial.errors import UserError
from controversial.records.manifest import ManifestRow, read_manifest, without_timing, write_manifest
from controversial.records.runs import RUN_SETTINGS_NAME
from controversial.synthesis import runstate
from controversial.synthesis.stimuli import save_png
from controversial.synthesis.sweeps import unordered_pairs

ROOT = Path(__file__).resolve().parents[2]
CELLS = {(a, b) for a in range(10) for b in range(10) if a != b}
NINE = ["vgg", "vgg_neg", "capsnet", "pcn", "madry_linf", "madry_l2", "capsnet_recon", "kde", "abs"]


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory) -> Path:
    """Tiny random stand-ins for abs, kde and vgg in one folder: ``<folder>/<name>.pt``."""
    return write_tiny_checkpoints(tmp_path_factory.mktemp("checkpoints"), ["abs", "vgg", "kde"], "mnist")


def _command(*overrides: str) -> list[str]:
    return [sys.executable, "synthesize.py", "progress=false", "wandb.mode=disabled", *overrides]


def _run(*overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        _command(*overrides), check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def _tiny(folder: Path) -> list[str]:
    return [f"model_a.checkpoint={folder}/${{.name}}.pt", f"model_b.checkpoint={folder}/${{.name}}.pt"]


def _row(cell: tuple[int, int], seed: int, accepted: bool, image_file: str = "") -> ManifestRow:
    return ManifestRow(
        "mnist",
        "abs",
        "vgg",
        *cell,
        str(cell[0]),
        str(cell[1]),
        seed,
        "synthetic",
        "noise",
        10,
        False,
        0.9 if accepted else 0.1,
        1.0,
        0.9,
        0.1,
        0.9,
        0.1,
        accepted,
        "accepted" if accepted else "below_threshold",
        image_file,
        0.0,
    )


# --- pairs and configs -----------------------------------------------------------------------


def test_unordered_pairs_of_nine_models_are_36_in_list_order():
    pairs = unordered_pairs(NINE)
    assert len(pairs) == 36 == len({frozenset(p) for p in pairs})
    assert pairs[0] == ("vgg", "vgg_neg") and all(a != b for a, b in pairs)
    with pytest.raises(ValueError, match="abs more than once"):
        unordered_pairs(["abs", "vgg", "abs"])


def test_experiment_sweeps_the_36_pairs_of_its_model_list_into_a_stable_folder():
    cfg = compose_synthesize("experiment=exp1_mnist")
    assert list(cfg.models) == NINE
    swept = cfg.hydra.sweeper.params.pair.split(",")
    assert len(swept) == 36 and swept[0] == "vgg__vgg_neg" and "kde__abs" in swept
    assert cfg.hydra.sweep.dir == "multirun/exp1_mnist"
    three = compose_synthesize("experiment=exp1_mnist", "models=[abs,kde,vgg]")
    assert three.hydra.sweeper.params.pair == "abs__kde,abs__vgg,kde__vgg"


def test_a_pair_option_selects_both_model_configs():
    cfg = compose_synthesize("pair=kde__vgg", "model_a.checkpoint=/x/a.pt")
    assert (cfg.model_a.name, cfg.model_b.name, cfg.model_a.checkpoint) == ("kde", "vgg", "/x/a.pt")


def test_slurm_launcher_composes_with_cfg_job():
    cfg = compose_synthesize("experiment=exp1_mnist", "hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.partition, launcher.gpus_per_node, launcher.array_parallelism) == ("gpu", 1, 36)


@pytest.mark.slow
def test_slurm_launcher_job_config_from_the_command_line():
    result = _run("experiment=exp1_mnist", "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "--cfg", "job")
    assert result.returncode == 0, result.stderr
    job = OmegaConf.create(result.stdout)
    assert job.experiment_name == "exp1_mnist" and len(job.models) == 9


# --- run state -------------------------------------------------------------------------------


def test_pending_work_skips_accepted_cells_and_used_seeds():
    rows = [_row((0, 1), 0, True), _row((0, 2), 0, False), _row((0, 2), 1, False)]
    cells = [(0, 1), (0, 2), (1, 0)]
    assert runstate.pending_work(rows, cells, [0]) == [((1, 0), 0)]
    assert runstate.pending_work(rows, cells, [1]) == [((1, 0), 1)]
    assert runstate.pending_work(rows, cells, [2]) == [((0, 2), 2), ((1, 0), 2)]
    assert runstate.attempt_seeds(10, 2, 3) == [16, 17, 18]


def test_a_retry_batch_takes_the_later_attempts_of_its_cells_while_they_fit():
    rows = [_row((0, 1), 0, True), _row((0, 2), 0, False), _row((1, 0), 0, False)]
    cells = [(0, 1), (0, 2), (1, 0)]
    # attempt 1 (seed 1) for the two failed cells, then whole later attempts up to 5 images: attempts 1 and 2
    jobs, last = runstate.attempts_batch(rows, cells, 0, 1, 1, max_attempts=5, capacity=5)
    assert jobs == [((0, 2), 1), ((1, 0), 1), ((0, 2), 2), ((1, 0), 2)] and last == 2
    # never past max_attempts, and no look-ahead without capacity
    assert runstate.attempts_batch(rows, cells, 0, 1, 1, max_attempts=3, capacity=90)[1] == 2
    assert runstate.attempts_batch(rows, cells, 0, 1, 1, max_attempts=5, capacity=0) == ([((0, 2), 1), ((1, 0), 1)], 1)
    # the first attempt is never split or extended beyond its own jobs when it fills the capacity
    assert runstate.attempts_batch([], cells, 0, 0, 1, max_attempts=5, capacity=3) == (
        [((0, 1), 0), ((0, 2), 0), ((1, 0), 0)],
        0,
    )
    # an attempt already run (its rows exist) has nothing left; the next one starts a new batch
    after_attempt_1 = rows + [_row((0, 2), 1, False), _row((1, 0), 1, False)]
    assert runstate.attempts_batch(after_attempt_1, cells, 0, 1, 1, 5, 5) == ([], 1)
    assert runstate.attempts_batch(after_attempt_1, cells, 0, 2, 1, 5, 5)[0] == [
        ((0, 2), 2),
        ((1, 0), 2),
        ((0, 2), 3),
        ((1, 0), 3),
    ]


def test_rows_with_missing_or_corrupt_pngs_are_dropped_and_temp_files_removed(tmp_path):
    save_png(tmp_path / "good.png", np.zeros((1, 28, 28)))
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    rows = [
        _row((0, 1), 0, True, "good.png"),
        _row((0, 2), 0, True, "bad.png"),
        _row((0, 3), 0, True, "gone.png"),
        _row((0, 4), 0, False),
    ]
    write_manifest(tmp_path / "manifest.csv", rows)
    assert runstate.load_finished_rows(tmp_path, "abs", "vgg") == [rows[0], rows[3]]
    with pytest.raises(UserError, match="belongs to abs vs vgg, not kde vs vgg"):
        runstate.load_finished_rows(tmp_path, "kde", "vgg")
    (tmp_path / ".manifest.csv.x1.tmp").write_text("half")
    assert [p.name for p in runstate.remove_stale_temp_files(tmp_path)] == [".manifest.csv.x1.tmp"]


def test_a_run_dir_refuses_other_settings(tmp_path):
    runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {"threshold": 0.75}})
    runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {"threshold": 0.75}})
    with pytest.raises(UserError, match=r"synthesis: \{'threshold': 0.75\} -> \{'threshold': 0.9\}"):
        runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {"threshold": 0.9}})


def test_a_run_dir_recorded_with_synthesis_alpha_resumes_as_sharpness(tmp_path):
    (tmp_path / RUN_SETTINGS_NAME).write_text('{"seed": 0, "synthesis": {"alpha": 1.0, "threshold": 0.75}}')
    runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {"sharpness": 1.0, "threshold": 0.75}})


# The settings a run recorded in the project's first release; every key added since must say, in runstate's
# ADDED_* tables, what value the runs recorded without it had in effect, or those runs can no longer resume.
FIRST_SYNTHESIS_KEYS = {"sharpness", "max_steps", "patience", "tolerance_levels", "threshold", "stop_score"}
FIRST_SYNTHESIS_KEYS |= {"parametrization", "fourier_decay", "jitter"}
FIRST_DIFFUSION_KEYS = {"model", "guidance_scale", "guidance", "sampling_steps", "recurrence"}


def test_every_setting_added_since_the_first_runs_declares_the_value_they_had():
    from controversial.synthesis.options import DiffusionOptions, SynthesisOptions

    assert set(SynthesisOptions().model_dump()) - FIRST_SYNTHESIS_KEYS == set(runstate.ADDED_SYNTHESIS_DEFAULTS)
    assert set(DiffusionOptions().model_dump()) - FIRST_DIFFUSION_KEYS == set(runstate.ADDED_DIFFUSION_DEFAULTS)


def test_a_diffusion_run_recorded_before_eta_and_guide_until_resumes_with_their_old_values_only(tmp_path):
    old = {"model": "bundled", "guidance_scale": 0.05, "guidance": "clean", "sampling_steps": 50, "recurrence": 1}
    (tmp_path / RUN_SETTINGS_NAME).write_text(json.dumps({"seed": 0, "synthesis": {}, "diffusion": old}))
    then = {"seed": 0, "synthesis": {"ensemble": "joint"}, "diffusion": {**old, "eta": 0.0, "guide_until": None}}
    runstate.check_run_settings(tmp_path, then)
    with pytest.raises(UserError, match="other settings .*diffusion:"):
        runstate.check_run_settings(tmp_path, {**then, "diffusion": {**old, "eta": 1.0, "guide_until": 0.9}})
    with pytest.raises(UserError, match="other settings .*synthesis:"):
        runstate.check_run_settings(tmp_path, {**then, "synthesis": {"ensemble": "round_robin"}})


def test_a_run_dir_recorded_before_the_stall_rule_resumes_without_it_only(tmp_path):
    (tmp_path / RUN_SETTINGS_NAME).write_text('{"seed": 0, "synthesis": {"threshold": 0.75}}')
    without = {"seed": 0, "synthesis": {"threshold": 0.75, "stall_steps": None, "stall_gain": 0.01}}
    runstate.check_run_settings(tmp_path, without)
    with pytest.raises(UserError, match="stall_steps': 50"):
        runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {**without["synthesis"], "stall_steps": 50}})


def test_a_run_dir_recorded_before_stall_on_resumes_watching_the_hard_score_only(tmp_path):
    recorded = {"seed": 0, "synthesis": {"threshold": 0.75, "stall_steps": 50, "stall_gain": 0.01}}
    (tmp_path / RUN_SETTINGS_NAME).write_text(json.dumps(recorded))
    runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {**recorded["synthesis"], "stall_on": "hard"}})
    with pytest.raises(UserError, match="stall_on"):
        runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {**recorded["synthesis"], "stall_on": "smooth"}})


def test_a_run_dir_recorded_before_precision_and_compile_resumes_in_fp32_eager_only(tmp_path):
    (tmp_path / RUN_SETTINGS_NAME).write_text('{"seed": 0, "synthesis": {"threshold": 0.75}}')
    eager = {"seed": 0, "synthesis": {"threshold": 0.75, "precision": "fp32", "torch_compile": False}}
    runstate.check_run_settings(tmp_path, eager)
    for changed in ({"precision": "bf16"}, {"torch_compile": True}):
        with pytest.raises(UserError, match=next(iter(changed))):
            runstate.check_run_settings(tmp_path, {"seed": 0, "synthesis": {**eager["synthesis"], **changed}})


def test_the_run_dir_lock_excludes_a_second_writer(tmp_path):
    with runstate.exclusive_run_dir(tmp_path):
        fd = os.open(tmp_path / runstate.LOCK_NAME, os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    fd = os.open(tmp_path / runstate.LOCK_NAME, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit
    os.close(fd)


# --- end to end --------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_experiment_sweep_resumes_and_redoes_only_a_lost_cell(tmp_path, tiny_checkpoints):
    sweep = [
        f"sweep_dir={tmp_path}",
        "experiment=exp1_mnist",
        "models=[vgg,abs]",
        "synthesis.max_steps=25",
        *_tiny(tiny_checkpoints),
        "-m",
    ]
    first = _run(*sweep)
    assert first.returncode == 0, first.stderr
    assert "pair=vgg__abs" in first.stdout
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["vgg_vs_abs"]
    rows = read_manifest(tmp_path / "vgg_vs_abs" / "manifest.csv")
    assert {(r.class_a, r.class_b) for r in rows} == CELLS
    victim = next(r for r in rows if r.accepted)
    (tmp_path / "vgg_vs_abs" / victim.image_file).unlink()

    second = _run(*sweep)
    assert second.returncode == 0, second.stderr
    assert "resuming" in second.stdout and f"{len(rows) - 1} earlier row(s)" in second.stdout
    again = read_manifest(tmp_path / "vgg_vs_abs" / "manifest.csv")
    kept = [r for r in rows if r != victim]
    assert without_timing(again[: len(kept)]) == without_timing(kept)  # untouched rows stay, in order
    # only the lost cell is redone: its seed again, plus (retry_lookahead) the later attempts' seeds it never ran
    assert {r.cell for r in again[len(kept) :]} == {victim.cell}
    redone = again[len(kept)]  # same cell and seed; in another batch, so equal only up to float rounding
    assert (redone.cell, redone.seed, redone.image_file) == (victim.cell, victim.seed, victim.image_file)
    assert redone.hard_score == pytest.approx(victim.hard_score, abs=0.05)
    assert runstate.load_finished_rows(tmp_path / "vgg_vs_abs", "vgg", "abs") == again


@pytest.mark.slow
def test_a_missing_checkpoint_skips_that_pair_and_the_sweep_goes_on(tmp_path, tiny_checkpoints):
    result = _run(
        f"sweep_dir={tmp_path}",
        "model_a=abs,kde",
        "model_b=vgg",
        "synthesis.max_steps=5",
        f"model_b.checkpoint={tiny_checkpoints}/vgg.pt",
        f"model_a.checkpoint={tiny_checkpoints}/${{.name}}_missing.pt",
        "-m",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("skipped, the sweep goes on: no checkpoint for model") == 2


def _unlisted_png(run_dir: Path) -> bool:
    """A stimulus PNG that the run dir's manifest does not list yet (the manifest follows each attempt's PNGs)."""
    if not (run_dir / "manifest.csv").is_file():
        return False
    listed = {row.image_file for row in read_manifest(run_dir / "manifest.csv")}
    return any(path.name not in listed for path in run_dir.glob("*_seed*.png"))


@pytest.mark.slow
def test_kill_9_then_rerun_gives_every_cell_once_and_the_uninterrupted_result(tmp_path, tiny_checkpoints):
    settings = [
        "synthesis.max_steps=300",
        "synthesis.stop_score=null",
        "synthesis.threshold=0.97",
        "max_attempts=4",
        *_tiny(tiny_checkpoints),
    ]
    reference = _run(f"output_dir={tmp_path / 'reference'}", *settings)
    assert reference.returncode == 0, reference.stderr
    expected = read_manifest(tmp_path / "reference" / "manifest.csv")
    assert 90 < len(expected) < 360, "settings should make some cells need retries"

    run_dir = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        _command(f"output_dir={run_dir}", *settings),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    # kill inside a later attempt, once its PNGs are on disk but its manifest rows are not yet
    while process.poll() is None and not _unlisted_png(run_dir) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, "the run finished before it could be killed; make it slower"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert 0 < len(read_manifest(run_dir / "manifest.csv")) < len(expected)

    resumed = _run(f"output_dir={run_dir}", *settings)
    assert resumed.returncode == 0, resumed.stderr
    rows = read_manifest(run_dir / "manifest.csv")
    assert without_timing(rows) == without_timing(expected)
    seeds_per_cell = {}
    for row in rows:
        seeds_per_cell.setdefault((row.class_a, row.class_b), []).append(row.seed)
    assert set(seeds_per_cell) == CELLS and all(len(s) == len(set(s)) for s in seeds_per_cell.values())
    # a cell accepted in the first attempt (a batch of its own: it fills the capacity) is never retried
    accepted_first = {(r.class_a, r.class_b) for r in rows if r.accepted and r.seed == 0}
    assert accepted_first and all(seeds_per_cell[cell] == [0] for cell in accepted_first)
    assert not list(run_dir.glob(".*.tmp"))
    for row in rows:
        assert (run_dir / row.image_file).read_bytes() == (tmp_path / "reference" / row.image_file).read_bytes()
