"""The cost of natural-looking controversial stimuli: guided diffusion beside pixel gradient ascent.

For each model pair (``--pairs``), the same cells (``--classes``: every ordered pair among these classes) are
synthesized by both methods of ``synthesis.method``, each with up to ``--max-attempts`` attempts (a failed cell
is retried from a new seed, as ``synthesize.py`` does). Printed per pair and method: cells accepted, the median
over cells of the best hard score (Eq. 2 on the 8-bit image, the acceptance rule), the KID x 10^3 of the
accepted stimuli against test images (``synthesis.naturalness``), the seconds in the classifiers' forward and
backward per accepted stimulus, and all seconds per accepted stimulus; a per-cell list names the cells that
guidance could not make controversial. Gradient ascent starts as the task does (noise, or test images for a
pair with a model that declares ``synthesis_init: test_image``). Each run's best images and grid are saved in
``--out``; ``--report`` prints the table again from there.

    python benchmarks/diffusion.py --out bench_diffusion            # all 90 cells; --classes 0,1,2,3,4: 20
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

from controversial.config import load_model_config
from controversial.datasets import DataOptions, dataset_info
from controversial.synthesis.engine import BatchResult, ordered_class_pairs
from controversial.synthesis.grids import plot_stimulus_grid
from controversial.synthesis.options import (
    METHODS,
    DiffusionOptions,
    MethodRun,
    OptimizerOptions,
    SynthesisOptions,
)
from controversial.synthesis.runstate import Element
from controversial.synthesis.starts import initial_images
from controversial.zoo.bundled import load_model

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    """One method on one pair: the best image and score per cell, and the seconds spent."""

    best: dict[tuple[int, int], tuple[float, torch.Tensor]] = field(default_factory=dict)
    model_seconds: float = 0.0
    total_seconds: float = 0.0
    attempts: int = 0

    def accepted(self, threshold: float) -> list[tuple[int, int]]:
        return [cell for cell, (hard, _) in self.best.items() if hard >= threshold]


def run_method(
    method: str,
    names: tuple[str, str],
    cells: list[tuple[int, int]],
    synthesis: SynthesisOptions,
    diffusion: DiffusionOptions,
    max_attempts: int,
) -> Outcome:
    """Attempts until every cell is accepted or ``max_attempts``; a retry is the cell's next seed."""
    models = [load_model(name) for name in names]
    info = dataset_info(models[0].dataset)
    declared = [load_model_config(ROOT / "conf" / "model" / f"{n}.yaml").synthesis_init for n in names]
    start = "gaussian" if method == "diffusion" else ("test_image" if "test_image" in declared else "noise")
    outcome, pending = Outcome(), list(cells)
    for attempt in range(max_attempts):
        if not pending:
            break
        elements = [Element(a, b, attempt) for a, b in pending]
        starts, _ = initial_images(elements, info.image_shape, start, info.name, DataOptions(), names)
        targets = torch.tensor(pending)
        run = MethodRun(seed=attempt, optimizer=OptimizerOptions(), diffusion=diffusion, dataset=info.name)
        result: BatchResult = METHODS.get(method)(models, targets, starts, synthesis, run)
        outcome.model_seconds += result.model_seconds
        outcome.total_seconds += result.total_seconds
        outcome.attempts += 1
        for i, cell in enumerate(pending):
            hard = float(result.hard[i]) if not result.failures[i] else 0.0
            if cell not in outcome.best or hard > outcome.best[cell][0]:
                outcome.best[cell] = (hard, result.images[i].cpu())
        pending = [c for c in pending if outcome.best[c][0] < synthesis.threshold]
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="abs:vgg,vgg:madry_l2,kde:capsnet")
    parser.add_argument("--classes", default="0,1,2,3,4,5,6,7,8,9", help="the cells: ordered pairs among these")
    parser.add_argument("--methods", default="gradient,diffusion")
    parser.add_argument("--max-attempts", type=int, default=5)
    parser.add_argument("--guidance", default=DiffusionOptions().guidance, choices=["noise", "clean"])
    parser.add_argument("--guidance-scale", type=float, default=DiffusionOptions().guidance_scale)
    parser.add_argument("--sampling-steps", type=int, default=DiffusionOptions().sampling_steps)
    parser.add_argument("--recurrence", type=int, default=DiffusionOptions().recurrence)
    parser.add_argument("--guide-until", type=float, default=DiffusionOptions().guide_until)
    parser.add_argument("--eta", type=float, default=DiffusionOptions().eta)
    parser.add_argument("--prior", default=DiffusionOptions().model, help="diffusion.model: bundled or a folder")
    parser.add_argument("--out", type=Path, required=True, help="each run's best images, grid and figures go here")
    parser.add_argument("--report", action="store_true", help="only print the table of the runs already in --out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    classes = [int(c) for c in args.classes.split(",")]
    cells = ordered_class_pairs(classes)
    synthesis = SynthesisOptions()
    diffusion = DiffusionOptions(
        model=args.prior,
        guidance=args.guidance,
        guidance_scale=args.guidance_scale,
        sampling_steps=args.sampling_steps,
        recurrence=args.recurrence,
        guide_until=args.guide_until,
        eta=args.eta,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [(tuple(p.split(":")), m) for p in args.pairs.split(",") for m in args.methods.split(",")]
    if not args.report:
        for names, method in runs:
            outcome = run_method(method, (names[0], names[1]), cells, synthesis, diffusion, args.max_attempts)
            torch.save(
                {"outcome": outcome, "cells": cells, "diffusion": diffusion.model_dump()},
                args.out / f"{names[0]}_vs_{names[1]}_{method}.pt",
            )
            plot_stimulus_grid(
                {c: image.numpy() for c, (_, image) in outcome.best.items()},
                {c: hard >= synthesis.threshold for c, (hard, _) in outcome.best.items()},
                dataset_info("mnist").class_names,
                names[0],
                names[1],
                args.out / f"{names[0]}_vs_{names[1]}_{method}.png",
                classes,
            )
            print(
                f"{names[0]}:{names[1]} {method}: {len(outcome.accepted(synthesis.threshold))}/{len(cells)}", flush=True
            )
    report(runs, args.out, synthesis.threshold)


def report(runs: list[tuple[tuple[str, ...], str]], out: Path, threshold: float) -> None:
    """The table (and the cells not accepted) of the runs saved in ``out``."""
    from controversial.synthesis.naturalness import classes_floor, naturalness  # KID: the priors work's measure

    header = (
        "| pair | method | cells accepted | median best hard score | KID x 10^3 of the accepted (± sd) "
        "| model fwd/bwd s per accepted | all s per accepted | attempts |"
    )
    lines, failed, floors = [header, "|" + "---|" * 8], [], set()
    for names, method in runs:
        saved = torch.load(out / f"{names[0]}_vs_{names[1]}_{method}.pt", weights_only=False)  # our own file
        outcome, cells = saved["outcome"], saved["cells"]
        accepted = outcome.accepted(threshold)
        median = statistics.median(hard for hard, _ in outcome.best.values())
        kid_text = "n/a (fewer than 2 accepted)"
        if len(accepted) >= 2:
            measured = naturalness(torch.stack([outcome.best[c][1] for c in accepted]), "mnist")
            kid_text = f"{measured.kid:.0f} ± {measured.kid_std:.0f}"
            floors.add(f"real test images {measured.floor:.0f}, uniform noise {measured.ceiling:.0f}")
        per_accepted = [
            f"{seconds / len(accepted):.2f}" if accepted else f"none accepted in {seconds:.0f} s"
            for seconds in (outcome.model_seconds, outcome.total_seconds)
        ]
        lines.append(
            f"| {names[0]}–{names[1]} | {method} | {len(accepted)}/{len(cells)} | {median:.3f} | {kid_text} | "
            f"{per_accepted[0]} | {per_accepted[1]} | {outcome.attempts} |"
        )
        failed += [
            f"{names[0]}–{names[1]} {method}: cell {a}->{b}, best hard score {outcome.best[(a, b)][0]:.3f}"
            for a, b in cells
            if (a, b) not in accepted
        ]
    print("\n".join(lines))
    print(f"\nKID x 10^3 baselines: {'; '.join(sorted(floors))}")
    classes = sorted({c for cell in cells for c in cell}) if runs else []  # every run has the same cells
    if 0 < len(classes) < len(dataset_info("mnist").class_names):
        floor = classes_floor("mnist", classes, len(cells))
        print(f"real test images of classes {classes} alone ({len(cells)}): {floor:.0f}")
    print("\ncells not accepted:\n" + ("\n".join(failed) or "none"))


if __name__ == "__main__":
    main()
