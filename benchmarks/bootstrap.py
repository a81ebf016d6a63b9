"""Wall and CPU time and peak memory of the participant x stimulus bootstrap at PNAS scale, fast vs the plain reference.

Study: simulated, 30 participants x 820 stimuli (36 model pairs x 20 + 100 natural) x 10 categories
x 9 models; 37 strata. Fast: ``controversial.analysis.bootstrap`` for all resamples (every model,
both ceilings) with each of ``--threads`` (threads over chunks; the numbers are the same), then
percentile CIs and Holm-Sidak pairwise tests among the 9 models + lower ceiling (45 pairs).
Reference: ``controversial/references/bootstrap.py`` (one thread) on the first resamples,
extrapolated linearly. All in this one run, interleaved ``--repeats`` times (medians count, so a
burst of load from other processes on a shared machine hits every side alike); the overlapping
resamples are compared number by number. CPU time (``time.process_time``, all threads) is printed
beside wall time: on a loaded machine it is the steadier measure of the work itself. Peak memory:
the most the one-thread fast side held at once (``tracemalloc``, which sees numpy's arrays), and the
process's peak resident set (torch's libraries included).

    python benchmarks/bootstrap.py [--resamples 100000] [--reference-resamples 1000] [--repeats 3] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tracemalloc

# BLAS threads must be fixed before numpy loads. Default 1: on a shared machine, multi-threaded
# BLAS next to other busy processes spins and runs many times slower (see docs/analysis.md).
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--blas-threads", default="1")
BLAS_THREADS = _pre.parse_known_args()[0].blas_threads
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS

import numpy as np  # noqa: E402

from controversial.analysis.bootstrap import BLOCK, LOWER, bootstrap, pairwise_tests, percentile_ci  # noqa: E402
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities  # noqa: E402
from controversial.references.bootstrap import reference_bootstrap  # noqa: E402


def timed(run):
    """(result, wall seconds, CPU seconds of the whole process) of ``run()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--reference-resamples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each side; medians count")
    parser.add_argument("--chunk-size", type=int, default=10_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="fast side's threads over chunks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", default="1", help="BLAS threads (set before numpy loads)")
    args = parser.parse_args()

    models = simulate_models(n_models=9, seed=args.seed)
    human = simulate_participants(true_probabilities(models, models.names, {"sim3": 1.0}), 30, seed=args.seed + 1)
    conditions = [s.condition for s in models.stimuli]
    S, N, K = human.shape
    print(
        f"study: {S} participants x {N} stimuli x {K} categories x {len(models.names)} models, "
        f"{len(set(conditions))} strata; cpu cores: {os.cpu_count()}, BLAS threads: {BLAS_THREADS}, "
        f"load average at start: {os.getloadavg()[0]:.1f}"
    )

    def fast(threads: int):
        return bootstrap(
            human, models.probabilities, models.names, conditions, args.resamples, args.seed, args.chunk_size,
            threads=threads,
        )  # fmt: skip

    bootstrap(human, models.probabilities, models.names, conditions, BLOCK, args.seed)  # warm-up: torch loads
    times: dict[str, list[tuple[float, float]]] = {}
    peaks = []
    for _ in range(args.repeats):
        for threads in args.threads:
            if threads == 1:
                tracemalloc.start()
            dist, wall, cpu = timed(lambda: fast(threads))
            times.setdefault(f"fast, {threads} thread(s)", []).append((wall, cpu))
            if threads == 1:
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
        ranked = sorted(models.names, key=lambda m: -dist.estimates[dist.names.index(m)])
        tests, wall, cpu = timed(
            lambda: (percentile_ci(dist.samples), pairwise_tests(dist, include=ranked + [LOWER]))[1]
        )
        times.setdefault("  CIs and 45-pair Holm-Sidak tests", []).append((wall, cpu))
        reference, wall, cpu = timed(
            lambda: reference_bootstrap(human, models.probabilities, conditions, args.reference_resamples, args.seed)
        )
        times.setdefault("plain reference (loops, np.corrcoef)", []).append((wall, cpu))
    load_end = os.getloadavg()[0]
    n_pairs = len(tests.names) * (len(tests.names) - 1) // 2
    scale = args.resamples / args.reference_resamples
    median = {name: tuple(float(np.median([t[i] for t in runs])) for i in (0, 1)) for name, runs in times.items()}
    ref_wall, ref_cpu = (t * scale for t in median["plain reference (loops, np.corrcoef)"])
    diff = np.nanmax(np.abs(reference - dist.samples[: args.reference_resamples]))

    print()
    print(
        f"| method | resamples run | median wall (s) | median CPU (s) | wall for {args.resamples:,} (s) "
        "| x reference, wall | x reference, CPU | runs, wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in times.items():
        wall, cpu = median[name]
        n = args.reference_resamples if name.startswith("plain") else args.resamples
        full = wall * args.resamples / n
        ratios = ("1", "1") if name.startswith("plain") else (f"{ref_wall / wall:,.0f}", f"{ref_cpu / cpu:,.0f}")
        each = ", ".join(f"{t[0]:.2f}" for t in runs)
        print(f"| {name} | {n:,} | {wall:.2f} | {cpu:.2f} | {full:.2f} | {ratios[0]} | {ratios[1]} | {each} |")
    print()
    post = median["  CIs and 45-pair Holm-Sidak tests"][0]
    one = median.get("fast, 1 thread(s)")
    if one:
        print(f"speed-up with CIs and tests, 1 thread: {ref_wall / (one[0] + post):,.0f}x wall")
    print(f"load average at end: {load_end:.1f}")
    print(
        f"peak memory of the fast bootstrap (tracemalloc): {max(peaks, default=0) / 2**20:.0f} MiB; "
        f"process peak resident set: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB"
    )
    print(
        f"max |fast - reference| over the first {args.reference_resamples:,} resamples x {dist.samples.shape[1]} "
        f"statistics: {diff:.2e}; {n_pairs} pairwise tests"
    )


if __name__ == "__main__":
    main()
