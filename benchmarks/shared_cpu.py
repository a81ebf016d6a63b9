"""Wall time of the main job alone and beside one other CPU-bound process, with the project's thread defaults.

The main job (``synthesize.py model_a=abs model_b=vgg``) runs in a fresh process per row, once on an
otherwise idle machine and once while a competitor keeps every core busy: a second synthesis
(``model_a=abs model_b=capsnet``) started just before it and killed just after it. The project's defaults
(``controversial/threads.py``: passive OpenMP waiting, one thread per available core) are compared
with OpenMP's active waiting, the library default they replace. Run it on an otherwise idle machine:

    python benchmarks/shared_cpu.py

The target (issue 14) is at most 3x the idle time beside one CPU-bound process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ["synthesize.py", "model_a=abs", "model_b=vgg", "progress=false", "wandb.mode=disabled"]
# A competitor that needs no dataset (the KDE reads MNIST from the data root) and outlasts the main job.
COMPETITOR = ["synthesize.py", "model_a=abs", "model_b=capsnet", "progress=false", "wandb.mode=disabled"]


def _environment(wait_policy: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "OPENBLAS_", "MKL_"))}
    env.pop("CONTROVERSIAL_THREADS", None)
    if wait_policy is not None:
        env["OMP_WAIT_POLICY"] = wait_policy  # set before the program starts, so its default does not apply
    return env


def time_main_job(out_dir: Path, wait_policy: str | None, competitor_dir: Path | None) -> float:
    """Seconds of one main-job run; with ``competitor_dir``, beside a competing synthesis writing there."""
    competitor = None
    if competitor_dir is not None:
        competitor = subprocess.Popen(
            [sys.executable, *COMPETITOR, f"output_dir={competitor_dir}"],
            cwd=ROOT,
            env=_environment(wait_policy),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(10)  # past its start-up, into the synthesis loop
    try:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, *MAIN_JOB, f"output_dir={out_dir}"],
            cwd=ROOT,
            env=_environment(wait_policy),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - start
        if competitor is not None and competitor.poll() is not None:
            raise RuntimeError(
                f"the competing synthesis ended early (exit {competitor.returncode}): no competition measured"
            )
        return seconds
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(f"cores available: {len(os.sched_getaffinity(0))}")
    print("| OpenMP waiting | idle machine (s) | beside one CPU-bound synthesis (s) | ratio |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, policy in (("passive (the project's default)", None), ("active (OpenMP's default)", "ACTIVE")):
            tag = policy or "default"
            idle = time_main_job(Path(tmp) / f"idle_{tag}", policy, None)
            shared = time_main_job(Path(tmp) / f"shared_{tag}", policy, Path(tmp) / f"competitor_{tag}")
            print(f"| {label} | {idle:.1f} | {shared:.1f} | {shared / idle:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
