"""What one more stimulus does for a close pair of models, each way round: the planner's change in z when each
unchosen candidate of a pool joins the paper's design (or ``--design``), for "A true, B the rival" and for "B true,
A the rival".

A design shared by every truth must separate A from B whichever of the two generated the ratings. A stimulus that
raises both z's serves both truths; one that raises one and lowers the other makes the design trade them. The table
gives, per kind of candidate (its condition, and its source where that is not the paper's kind), the mean change of
each z and how many candidates raise both by more than ``--both-above``; then the candidates that raise the smaller
of the two most, with both models' probabilities. Changes are in thousandths of z at ``--participants``, from a
reference panel of the two truths (``controversial/analysis/separation.py``).

    python benchmarks/pair_gains.py --pool outputs/design/pool_sweep.npz --pair kde:abs
    python benchmarks/pair_gains.py --pool outputs/design/pool_sweep_one_sided.npz --pair kde:abs
    python benchmarks/pair_gains.py --pool outputs/design/pool_sweep_one_sided.npz \
        --design outputs/design/cache/optimal-7eb72f4708f6932f.npz   # at the optimal design chosen from that pool
    python benchmarks/pair_gains.py --pool outputs/design/pool_sweep.npz --panel 256 --pair-design 10 \
        --design outputs/design/cache/optimal-cab9d5202e4db104.npz   # and a design for kde and abs alone
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from design import PAPER_CONSTRAINTS, load_pool, paper_design  # noqa: E402

from controversial.analysis.separation import ReferencePanel  # noqa: E402
from controversial.analysis.simulate import ParticipantNoise  # noqa: E402
from controversial.study.design import Pool, design_weights, held_out_panel, select_design  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default=str(ROOT.parent / "outputs" / "design" / "pool_sweep.npz"))
    parser.add_argument("--pair", default="kde:abs", metavar="A:B")
    parser.add_argument("--noise-sd", type=float, nargs=2, default=(24.0, 32.0), help="participant logit noise range")
    parser.add_argument("--participants", type=float, default=20.0)
    parser.add_argument("--panel", type=int, default=128, help="reference participants per truth")
    parser.add_argument("--both-above", type=float, default=3.0, help="in thousandths of z")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--design",
        help="start from this design instead of the paper's: a design file of benchmarks/design.py's cache "
        "(outputs/design/cache/optimal-*.npz, chosen from the same pool)",
    )
    parser.add_argument(
        "--pair-design",
        type=float,
        metavar="PARTICIPANTS",
        help="also choose a design for A and B alone (a panel of those two truths, maximin at this many "
        "participants, the paper's constraints) and print every truth's predicted need under it, the start "
        "design and the paper's: how far the pair could go if no other truth shared the design",
    )
    args = parser.parse_args()
    if args.pair_design is not None and not args.pair_design >= 2:  # also NaN
        parser.error(f"--pair-design must be >= 2 participants (the analysis's minimum), got {args.pair_design}")
    if not Path(args.pool).is_file():
        parser.error(f"--pool {args.pool}: no such file; build it with python benchmarks/design_pool.py")
    names, P, pool, plain, hard = load_pool(Path(args.pool))
    pair = args.pair.split(":")
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(names):
        parser.error(f"--pair must be two different models of {', '.join(names)} as A:B, got {args.pair}")
    a, b = names.index(pair[0]), names.index(pair[1])
    source = np.load(args.pool)["source"]
    if args.design:
        with np.load(args.design) as cached:
            design = cached["chosen"]
        if design.max() >= P.shape[1]:
            parser.error(f"--design {args.design} chooses candidate {design.max()}, beyond the pool's {P.shape[1]}")
    else:
        design = _paper(pool, plain, hard, args.seed)
    weights = design_weights(design, P.shape[1])
    noise = ParticipantNoise(sd=tuple(args.noise_sd))
    panel = ReferencePanel(P, pool.conditions, noise, args.panel, truths=[a, b], seed=args.seed)
    before = panel.separation(weights).z(args.participants)
    candidates = np.flatnonzero(weights == 0)
    after = panel.z_after(weights, candidates, args.participants)
    gain_a = 1000 * (after[:, 0, b] - before[0, b])  # A true, B the rival
    gain_b = 1000 * (after[:, 1, a] - before[1, a])
    both = np.minimum(gain_a, gain_b)
    A, B = pair
    kinds = np.array([_kind(pool.conditions[i], str(source[i]), pair) for i in candidates])
    base = args.design or "the paper's design"
    print(
        f"{args.pool}, {base}: z at {args.participants:g} participants: {A} true vs {B} "
        f"{before[0, b]:.2f}, {B} true vs {A} {before[1, a]:.2f}; change per added candidate, in 1/1000 z\n"
    )
    print(f"| candidates | n | {A} true: mean change | {B} true: mean change | both above {args.both_above:g} |")
    print("|---|---|---|---|---|")
    rows = [(kind, kinds == kind) for kind in np.unique(kinds)]
    for kind, members in sorted(rows, key=lambda row: (-(both[row[1]] > args.both_above).sum(), row[0])):
        print(
            f"| {kind} | {members.sum()} | {gain_a[members].mean():.1f} | {gain_b[members].mean():.1f} | "
            f"{int((both[members] > args.both_above).sum())} |"
        )
    print(f"\nThe {args.top} candidates that raise both most (the smaller change first):")
    np.set_printoptions(precision=2, suppress=True)
    for i in np.argsort(-both)[: args.top]:
        n = candidates[i]
        print(f"  {kinds[i]}: {both[i]:.1f}, {max(gain_a[i], gain_b[i]):.1f}; {A} {P[a, n]}, {B} {P[b, n]}")
    if args.pair_design is not None:
        chosen = select_design(pool, panel, PAPER_CONSTRAINTS, args.pair_design, seed=args.seed).chosen
        paper = design if args.design is None else _paper(pool, plain, hard, args.seed)
        designs = {"paper": paper, f"{A} and {B}": chosen}
        if args.design:
            designs["--design"] = design
        _needs(designs, names, P, pool, noise, args)


def _paper(pool: Pool, plain: np.ndarray, hard: np.ndarray, seed: int) -> np.ndarray:
    """The paper's design, as ``benchmarks/design.py`` (a) chooses it at this seed."""
    return paper_design(pool, plain, hard, "ilp", np.random.default_rng(seed))


def _needs(
    designs: dict[str, np.ndarray],
    names: tuple[str, ...],
    P: np.ndarray,
    pool: Pool,
    noise: ParticipantNoise,
    args: argparse.Namespace,
) -> None:
    """Every truth's predicted participants under each design, on a held-out panel of every truth."""
    check = held_out_panel(P, pool.conditions, noise, args.panel, seed=args.seed)
    print("\nPredicted participants needed (held-out panel; alpha 0.05, power 0.8, 45 comparisons):")
    print("| design | " + " | ".join(names) + " | mean |")
    print("|---|" + "---|" * (len(names) + 1))
    for label, chosen in designs.items():
        need = check.separation(design_weights(chosen, P.shape[1])).participants_needed_per_truth(0.05, 0.8, 45)
        print(f"| {label} | " + " | ".join(f"{n:.0f}" for n in need) + f" | {need.mean():.1f} |")


def _kind(condition: str, source: str, pair: list[str]) -> str:
    """A candidate's row: its condition when it involves a model of the pair (with its source when that is not the
    paper's kind), else one row for the pairs of neither model."""
    involved = condition == "natural" or bool(set(condition.split("|")) & set(pair))
    kind = condition if involved else "pairs of neither model"
    return kind if source in ("synthetic", "natural") else f"{kind} ({source})"


if __name__ == "__main__":
    main()
