"""Calibration and power of the paired error-consistency test (``controversial.analysis.benchmark.kappa_inference``).

False positives: simulated datasets of *independent* observers (true kappa 0 for every pair, so two models'
mean kappa with the humans is the same), shaped like a model-vs-human dataset: 4 conditions x 80 trials, 5
humans and 2 models, each observer's accuracy per condition drawn from U(0.3, 0.95) (the two models differ in
accuracy, as real models do). The test should reject at about alpha: the rate over ``--datasets`` datasets is
printed with its binomial 95% interval, for the humans taken as fixed (the default: percentile bootstrap over
trials resampled within conditions) and as a sample of people (``observers=random``: the between-people spread
added, normal theory).

Power: observers who copy a shared per-trial outcome (``copy_observers``): humans with mutual kappa 0.33 (the
cue-conflict humans), model A with kappa 0.07 with each human (the published human-CNN range), model B with 0.07
+ delta; 5 humans, accuracy 0.7, one condition of n trials. The table gives the rejection rate per n and delta
and the fewest trials (of the grid) with power >= 0.8.

    python benchmarks/kappa_test.py [--datasets 2000] [--resamples 1000] [--power-datasets 200] [--figure PNG]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--blas-threads", default="1")
BLAS_THREADS = _pre.parse_known_args()[0].blas_threads
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS

import numpy as np  # noqa: E402

from controversial.analysis.benchmark.kappa_inference import paired_test_rejects, power  # noqa: E402


def independent_dataset(
    rng: np.random.Generator, n_conditions: int, n_trials: int, n_observers: int
) -> tuple[np.ndarray, np.ndarray]:
    """(observers, trials) correct/incorrect of independent observers and the trial conditions."""
    conditions = np.repeat(np.arange(n_conditions), n_trials)
    accuracy = rng.uniform(0.3, 0.95, size=(n_observers, n_conditions))
    correct = rng.random((n_observers, n_conditions * n_trials)) < accuracy[:, conditions]
    return correct, conditions


def binomial_interval(hits: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a rate."""
    z = 1.959964
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=2000, help="simulated null datasets (>= 1000)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per test")
    parser.add_argument("--conditions", type=int, default=4)
    parser.add_argument("--trials", type=int, default=80, help="trials per condition (null datasets)")
    parser.add_argument("--humans", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--power-datasets", type=int, default=200, help="simulated datasets per power cell")
    parser.add_argument("--power-resamples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--figure", help="also draw the power curves into this PNG (and a PDF beside it)")
    parser.add_argument("--blas-threads", default="1", help="BLAS threads (set before numpy loads)")
    args = parser.parse_args()
    if args.datasets < 1 or args.resamples < 1 or args.power_datasets < 1:
        parser.error("--datasets, --resamples and --power-datasets must be at least 1")

    print(
        f"False-positive rate at alpha {args.alpha}: {args.datasets} datasets of independent observers, "
        f"{args.humans} humans + 2 models, {args.conditions} conditions x {args.trials} trials, "
        f"{args.resamples} resamples per test (BLAS threads {BLAS_THREADS})"
    )
    print(f"{'humans':<22} {'rejections':>10} {'rate':>6}  {'95% interval':>16}  {'seconds':>7}")
    for label, observers in (("fixed humans", "fixed"), ("random humans", "random")):
        rng = np.random.default_rng(args.seed)
        start = time.perf_counter()
        hits = 0
        for _ in range(args.datasets):
            correct, conditions = independent_dataset(rng, args.conditions, args.trials, args.humans + 2)
            hits += paired_test_rejects(
                correct[:2], correct[2:], conditions, args.resamples, rng, args.alpha, observers=observers
            )
        low, high = binomial_interval(hits, args.datasets)
        elapsed = time.perf_counter() - start
        print(f"{label:<22} {hits:>10} {hits / args.datasets:>6.3f}  [{low:.3f}, {high:.3f}]  {elapsed:>7.1f}")

    grid = [100, 200, 400, 800, 1600, 3200]
    deltas = [0.0, 0.05, 0.1, 0.15]
    print()
    print(
        f"Power (rejection rate at alpha {args.alpha}, trials resampled): human-human kappa 0.33, model A kappa "
        f"0.07, model B 0.07 + delta; {args.humans} humans, accuracy 0.7, one condition; "
        f"{args.power_datasets} datasets x {args.power_resamples} resamples per cell"
    )
    print(f"{'delta':>6} " + " ".join(f"{f'n={n}':>7}" for n in grid) + f"  {'n for power 0.8':>15}")
    curves = {}
    for delta in deltas:
        rates = [
            power(
                n,
                0.07,
                0.07 + delta,
                0.33,
                args.humans,
                0.7,
                args.power_datasets,
                args.power_resamples,
                seed=args.seed + n,
                alpha=args.alpha,
            )
            for n in grid
        ]
        enough = next((str(n) for n, r in zip(grid, rates) if r >= 0.8), f">{grid[-1]}") if delta else "-"
        print(f"{delta:>6.2f} " + " ".join(f"{r:>7.3f}" for r in rates) + f"  {enough:>15}")
        curves[delta] = rates
    if args.figure:
        draw_power(grid, curves, args.alpha, args.humans, args.power_datasets, args.figure)
        print(f"figure: {args.figure}")


def draw_power(
    grid: list[int], curves: dict[float, list[float]], alpha: float, humans: int, datasets: int, path: str
) -> None:
    """Rejection rate against trials, a line per kappa difference, with the 0.8 target and alpha."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for delta, rates in curves.items():
        se = np.sqrt(np.array(rates) * (1 - np.array(rates)) / datasets)
        label = "no difference (false positives)" if delta == 0 else f"kappa difference {delta:g}"
        ax.errorbar(grid, rates, yerr=se, marker="o", capsize=2, label=label)
    ax.axhline(0.8, color="0.4", ls="--", lw=1, label="power 0.8")
    ax.axhline(alpha, color="0.6", ls=":", lw=1, label=f"alpha {alpha:g}")
    ax.set_xscale("log")
    ax.set_xticks(grid, [str(n) for n in grid])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("trials (one condition)")
    ax.set_ylabel("rejection rate of the paired test")
    ax.set_title(f"paired kappa test: {humans} humans, model A kappa 0.07", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.savefig(path, dpi=200, bbox_inches="tight")
    fig.savefig(str(Path(path).with_suffix(".pdf")), bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    main()
