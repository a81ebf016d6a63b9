"""Wall time and peak memory of the participant x stimulus bootstrap at PNAS scale, fast vs the plain reference.

Study: simulated, 30 participants x 820 stimuli (36 model pairs x 20 + 100 natural) x 10 categories
x 9 models; 37 strata. Fast: ``controversial.analysis.bootstrap`` for all resamples (every model,
both ceilings), then percentile CIs and Holm-Sidak pairwise tests among the 9 models + lower
ceiling (45 pairs). Reference: ``controversial/references/bootstrap.py`` on the first resamples,
extrapolated linearly. Both in this one run, interleaved ``--repeats`` times (medians count, so a
burst of load from other processes on a shared machine hits both sides alike); the overlapping
resamples are compared number by number. Peak memory: the most the fast side held at once
(``tracemalloc``, which sees numpy's arrays), and the process's peak resident set.

    python benchmarks/bootstrap.py [--resamples 100000] [--reference-resamples 1000] [--repeats 3]
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

from controversial.analysis.bootstrap import LOWER, bootstrap, pairwise_tests, percentile_ci  # noqa: E402
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities  # noqa: E402
from controversial.references.bootstrap import reference_bootstrap  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--reference-resamples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each side; medians count")
    parser.add_argument("--chunk-size", type=int, default=10_000)
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

    fast_times, post_times, ref_times, peaks = [], [], [], []
    for _ in range(args.repeats):
        tracemalloc.start()
        start = time.perf_counter()
        dist = bootstrap(
            human, models.probabilities, models.names, conditions, args.resamples, args.seed, args.chunk_size
        )
        fast_times.append(time.perf_counter() - start)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        start = time.perf_counter()
        percentile_ci(dist.samples)
        ranked = sorted(models.names, key=lambda m: -dist.estimates[dist.names.index(m)])
        tests = pairwise_tests(dist, include=ranked + [LOWER])
        post_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = reference_bootstrap(human, models.probabilities, conditions, args.reference_resamples, args.seed)
        ref_times.append(time.perf_counter() - start)
    n_pairs = len(tests.names) * (len(tests.names) - 1) // 2
    fast, post, ref = (float(np.median(t)) for t in (fast_times, post_times, ref_times))
    scale = args.resamples / args.reference_resamples
    ref_extrapolated = ref * scale
    diff = np.nanmax(np.abs(reference - dist.samples[: args.reference_resamples]))

    def runs(times: list[float]) -> str:
        return ", ".join(f"{t:.2f}" for t in times)

    fast_total = fast + post
    rows = [
        ("fast (count weights x sufficient stats)", args.resamples, fast, fast, runs(fast_times)),
        ("  + CIs and 45-pair Holm-Sidak tests", args.resamples, post, fast_total, runs(post_times)),
        ("plain reference (loops, np.corrcoef)", args.reference_resamples, ref, ref_extrapolated, runs(ref_times)),
    ]
    print()
    print(f"| method | resamples run | median wall time (s) | time for {args.resamples:,} (s) | runs (s) |")
    print("|---|---|---|---|---|")
    for name, n, t, full, each in rows:
        print(f"| {name} | {n:,} | {t:.2f} | {full:.2f} | {each} |")
    print()
    print(f"speed-up (reference extrapolated x{scale:g} / fast resampling): {ref_extrapolated / fast:,.0f}x")
    print(f"speed-up including CIs and tests on the fast side: {ref_extrapolated / fast_total:,.0f}x")
    print(
        f"peak memory of the fast bootstrap (tracemalloc): {max(peaks) / 2**20:.0f} MiB; "
        f"process peak resident set: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB"
    )
    print(
        f"max |fast - reference| over the first {args.reference_resamples:,} resamples x {dist.samples.shape[1]} "
        f"statistics: {diff:.2e}; {n_pairs} pairwise tests"
    )


if __name__ == "__main__":
    main()
