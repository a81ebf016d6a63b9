"""Wall time of the main job alone and beside one other CPU-bound process, with the project's thread defaults.

The main job (``synthesize.py model_a=abs model_b=vgg``) runs in a fresh process per row, once on an
otherwise idle machine and once while a competitor keeps every core busy: a second synthesis
(``model_a=abs model_b=capsnet``, relaunched whenever it finishes) started just before it and killed just
after it; both processes start with the same thread setting. The project's defaults
(``controversial/threads.py``: passive OpenMP waiting, one thread per available core) are compared with
a short spin before sleeping, one thread, and OpenMP's active waiting. Run it on an otherwise idle machine:

    python benchmarks/shared_cpu.py

The target (issue 14) is at most 3x the idle time beside one CPU-bound process.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["synthesize.py", "model_a=abs", "model_b=vgg", "progress=false", "wandb.mode=disabled"]
# A competitor that needs no dataset (the KDE reads MNIST from the data root); a shell loop relaunches it,
# so the cores stay busy however long the main job takes.
COMPETITOR = ["synthesize.py", "model_a=abs", "model_b=capsnet", "progress=false", "wandb.mode=disabled"]


# Thread settings compared, each as the environment the program starts with. libgomp (PyTorch's OpenMP)
# spins GOMP_SPINCOUNT iterations before a waiting thread sleeps: 0 under PASSIVE, 3e10 under ACTIVE.
SETTINGS: dict[str, dict[str, str]] = {
    "the project's default (passive waiting)": {},
    "passive, then spin 10,000 (GOMP_SPINCOUNT)": {"GOMP_SPINCOUNT": "10000"},
    "passive, then spin 100,000 (GOMP_SPINCOUNT)": {"GOMP_SPINCOUNT": "100000"},
    "one thread (CONTROVERSIAL_THREADS=1)": {"CONTROVERSIAL_THREADS": "1"},
    "active waiting (OMP_WAIT_POLICY=ACTIVE)": {"OMP_WAIT_POLICY": "ACTIVE"},
}


def _environment(setting: dict[str, str]) -> dict[str, str]:
    """This process's environment without thread variables, plus ``setting`` (set before the program starts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "OPENBLAS_", "MKL_"))}
    env.pop("CONTROVERSIAL_THREADS", None)
    return {**env, **setting}


def time_main_job(out_dir: Path, setting: dict[str, str], competitor_dir: Path | None) -> float:
    """Seconds of one main-job run; with ``competitor_dir``, beside a competing synthesis writing there."""
    competitor = None
    if competitor_dir is not None:
        one_run = shlex.join([sys.executable, *COMPETITOR]) + f" output_dir={shlex.quote(str(competitor_dir))}/run_$i"
        competitor = subprocess.Popen(
            ["bash", "-c", f"i=0; while {one_run}; do i=$((i + 1)); done"],
            cwd=ROOT,
            env=_environment(setting),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so the loop and its child die together
        )
        time.sleep(10)  # past its start-up, into the synthesis loop
    try:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, *MAIN_JOB, f"output_dir={out_dir}"],
            cwd=ROOT,
            env=_environment(setting),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        if competitor is not None and competitor.poll() is not None:
            raise RuntimeError(
                f"the competing synthesis failed (exit {competitor.returncode}): no competition measured"
            )
        return seconds
    finally:
        if competitor is not None:
            os.killpg(competitor.pid, signal.SIGKILL)
            competitor.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=range(len(SETTINGS)),
        type=int,
        default=range(len(SETTINGS)),
        help="which rows to run, by index (default: all)",
    )
    args = parser.parse_args()
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    print("| threads | idle machine (s) | beside one CPU-bound synthesis (s) | ratio |")
    print("|---|---|---|---|")
    rows = list(SETTINGS.items())
    with tempfile.TemporaryDirectory() as tmp:
        for index in args.settings:
            label, setting = rows[index]
            idle = time_main_job(Path(tmp) / f"idle_{index}", setting, None)
            shared = time_main_job(Path(tmp) / f"shared_{index}", setting, Path(tmp) / f"competitor_{index}")
            print(f"| {label} | {idle:.1f} | {shared:.1f} | {shared / idle:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
