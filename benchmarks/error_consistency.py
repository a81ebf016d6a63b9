"""Wall time of all-pairs error consistency: 100 decision makers x 10,000 trials, 1,000 trial bootstraps.

Decision makers share a latent trial difficulty (so kappas are non-trivial); 16 conditions of
625 trials. Fast: ``controversial.analysis.error_consistency`` (Gram matrices; one weighted Gram
per bootstrap resample). Naive: a Python loop over the 4,950 pairs with per-pair numpy, timed on
the point estimate and on a few bootstrap resamples, extrapolated. All measured in this run.

    python benchmarks/error_consistency.py [--deciders 100] [--trials 10000] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import os
import time

# BLAS threads must be fixed before numpy loads. Default 1: on a shared machine, multi-threaded
# BLAS next to other busy processes spins and runs many times slower (see docs/analysis.md).
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--blas-threads", default="1")
BLAS_THREADS = _pre.parse_known_args()[0].blas_threads
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS

import numpy as np  # noqa: E402

from controversial.analysis import error_consistency as ec  # noqa: E402


def naive_kappa_matrix(correct: np.ndarray) -> np.ndarray:
    D = correct.shape[0]
    out = np.full((D, D), np.nan)
    for i in range(D):
        for j in range(i + 1, D):
            observed = ec.c_obs(correct[i], correct[j])
            expected = ec.c_exp(correct[i].mean(), correct[j].mean())
            out[i, j] = out[j, i] = ec.kappa(observed, expected)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deciders", type=int, default=100)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--naive-resamples", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--blas-threads", default="1", help="BLAS threads (set before numpy loads)")
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    difficulty = rng.normal(size=args.trials)
    skill = rng.normal(1.0, 0.5, size=(args.deciders, 1))
    correct = (skill - difficulty + rng.normal(size=(args.deciders, args.trials))) > 0
    conditions = np.repeat(np.arange(16), -(-args.trials // 16))[: args.trials].astype(str)
    data = ec.DecisionData(
        tuple(f"d{i}" for i in range(args.deciders)),
        tuple(map(str, range(args.trials))),
        conditions,
        correct,
        np.ones(correct.shape, bool),
    )
    pairs = args.deciders * (args.deciders - 1) // 2
    print(
        f"{args.deciders} decision makers x {args.trials:,} trials ({pairs:,} pairs), 16 conditions; "
        f"BLAS threads: {BLAS_THREADS}"
    )

    timings = []
    start = time.perf_counter()
    whole = ec.consistency(data, "whole")
    timings.append(("kappa matrix, whole dataset (fast)", time.perf_counter() - start, "measured"))
    start = time.perf_counter()
    ec.consistency(data, "per_condition")
    timings.append(("kappa matrix, per condition then mean (fast)", time.perf_counter() - start, "measured"))
    start = time.perf_counter()
    naive = naive_kappa_matrix(correct)
    naive_point = time.perf_counter() - start
    timings.append(("kappa matrix, whole dataset (naive pair loop)", naive_point, "measured"))
    start = time.perf_counter()
    ec.bootstrap_kappa(data, n_resamples=args.resamples, seed=args.seed)
    fast_boot = time.perf_counter() - start
    timings.append((f"{args.resamples:,} bootstrap resamples, all pairs, 95% CIs (fast)", fast_boot, "measured"))
    start = time.perf_counter()
    for _ in range(args.naive_resamples):
        idx = rng.integers(0, args.trials, args.trials)
        naive_kappa_matrix(correct[:, idx])
    naive_boot = (time.perf_counter() - start) * args.resamples / args.naive_resamples
    timings.append(
        (
            f"{args.resamples:,} bootstrap resamples (naive pair loop)",
            naive_boot,
            f"extrapolated from {args.naive_resamples}",
        )
    )
    start = time.perf_counter()
    band = ec.null_band(args.trials, grid_size=200, repeats=5)
    timings.append(("null band, 200 x 200 accuracy grid x 5 repeats", time.perf_counter() - start, "measured"))

    print()
    print("| step | wall time (s) | how |")
    print("|---|---|---|")
    for name, t, how in timings:
        print(f"| {name} | {t:.2f} | {how} |")
    print()
    print(f"speed-up, point matrix: {naive_point / timings[0][1]:,.0f}x; bootstrap: {naive_boot / fast_boot:,.0f}x")
    print(
        f"max |fast - naive| kappa: {np.nanmax(np.abs(whole.kappa - naive)):.1e}; "
        f"mean pairwise kappa {np.nanmean(whole.kappa[np.triu_indices(args.deciders, 1)]):.3f}; "
        f"null-band bins filled: {int(np.isfinite(band.kappa[:, 0]).sum())}/{len(band.kappa)}"
    )


if __name__ == "__main__":
    main()
