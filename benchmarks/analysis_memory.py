"""Peak memory and wall time of the participant x stimulus bootstrap (models and both noise ceilings) vs participants.

Each participant count runs in a fresh process, so its peak resident memory (``ru_maxrss``) is its own:
simulated study, S participants x 820 stimuli (36 model pairs x 20 + 100 natural) x 10 categories x 9 models,
point estimates (correlations, both noise ceilings) and the bootstrap with its percentile CIs and
pairwise tests.

    python benchmarks/analysis_memory.py [--participants 30 100 300 1000] [--resamples 100000]

Fewer resamples give the same peak memory (chunks are bounded; only the (resamples x 11) result grows)
and a time that scales linearly, so the table also extrapolates the time to 100,000 resamples.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def measure(participants: int, resamples: int) -> dict:
    """One count, in this process: build the study, run the analysis, report time and peak memory."""
    import numpy as np

    from controversial.analysis.bootstrap import LOWER, bootstrap, pairwise_tests, percentile_ci
    from controversial.analysis.ceilings import noise_ceiling
    from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities

    models = simulate_models(n_models=9, seed=0)
    human = simulate_participants(true_probabilities(models, models.names, {"sim3": 1.0}), participants, seed=1)
    conditions = [s.condition for s in models.stimuli]
    data_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    start = time.perf_counter()
    ceiling = noise_ceiling(human)
    dist = bootstrap(human, models.probabilities, models.names, conditions, resamples, seed=0)
    percentile_ci(dist.samples)
    pairwise_tests(dist, include=[*models.names, LOWER])
    elapsed = time.perf_counter() - start
    assert np.isfinite(dist.estimates).all() and np.isclose(dist.estimates[-2], ceiling.lower)
    return {
        "participants": participants,
        "stimuli": human.shape[1],
        "categories": human.shape[2],
        "models": len(models.names),
        "resamples": resamples,
        "seconds": round(elapsed, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "rss_after_data_gib": round(data_rss, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, nargs="+", default=[30, 100, 300, 1000])
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one count in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.resamples)))
        return
    print(
        f"cpu cores: {os.cpu_count()}, OMP/BLAS threads: {os.environ.get('OMP_NUM_THREADS', 'default')}, "
        f"load average at start: {os.getloadavg()[0]:.1f}"
    )
    print(
        "| participants | stimuli x categories x models | resamples run | wall time (s) | time for 100,000 (s) "
        "| peak resident memory (GiB) |"
    )
    print("|---|---|---|---|---|---|")
    for n in args.participants:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(n), "--resamples", str(args.resamples)],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(done.stdout.strip().splitlines()[-1])
        full = row["seconds"] * 100_000 / row["resamples"]
        print(
            f"| {n:,} | {row['stimuli']} x {row['categories']} x {row['models']} | {row['resamples']:,} | "
            f"{row['seconds']} | {full:.0f} | {row['peak_rss_gib']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
