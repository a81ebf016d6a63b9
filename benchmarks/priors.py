"""Image priors side by side: every parametrisation on the same model pairs, in one run.

For each pair (three MNIST, two CIFAR-10 by default) and each parametrisation (``PRIORS`` below: the
paper's pixels, the Fourier spectrum, the CPPN and the bundled generator's latent space) the script
synthesizes the same cells from the same noise starts, retries failed cells with new seeds as
``synthesize.py`` does, and prints per row: cells accepted at ``threshold`` (scored in float32 on the 8-bit
image, as always), the median hard score, KID x 10^3 of the accepted stimuli to the test images (with
the floor and the noise ceiling of the measure), and the seconds it took. A last column says whether a
prior meets the issue's goal on that pair: at least 80% of the cells accepted with a KID at most half
that of the pixel stimuli. One grid per pair and parametrisation (one image per cell, in the order of the
cells) goes to ``--grids`` (default docs/img/priors/).

CPU time is scarce, so ``--classes`` (per dataset) chooses the cells (all ordered pairs among those
classes), and ``--max-steps`` / ``--attempts`` bound the work; the output states exactly what was run.
Run with ``CONTROVERSIAL_DATA_ROOT`` set (the KDE and the KID need the data).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torchvision.utils import save_image

from controversial.datasets import dataset_info
from controversial.synthesis.engine import noise_images, ordered_class_pairs, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.zoo.bundled import load_model

PAIRS = "abs:vgg,vgg:madry_l2,kde:capsnet,vgg16:robust_l2,wrn:jem"
PRIORS: dict[str, dict[str, Any]] = {
    "pixel": {},
    "fourier": {"parametrization": "fourier", "jitter": 1},
    "cppn": {"parametrization": "cppn", "jitter": 1, "scale": 0.05, "rotate": 5},
    "generator": {"parametrization": "generator", "generator": {"name": "{dataset}/vae"}},
}
"""The synthesis options of each parametrisation (``{dataset}`` is the pair's); the rest are the defaults."""


def prior_options(prior: str, dataset: str, max_steps: int) -> SynthesisOptions:
    overrides = {k: v for k, v in PRIORS[prior].items() if k != "generator"}
    if "generator" in PRIORS[prior]:
        overrides["generator"] = {"name": PRIORS[prior]["generator"]["name"].format(dataset=dataset)}
    return SynthesisOptions(max_steps=max_steps, **overrides)


def synthesize_cells(models: list, cells: list[tuple[int, int]], options: SynthesisOptions, attempts: int) -> dict:
    """Every cell from seed 0's noise, failed cells again from seeds 1, 2, ...: per cell the accepted
    image (or the best-scoring one), its hard score, and whether it was accepted."""
    shape = dataset_info(models[0].dataset).image_shape
    images = torch.zeros(len(cells), *shape)
    hard = torch.full((len(cells),), -1.0)
    accepted = torch.zeros(len(cells), dtype=torch.bool)
    for attempt in range(attempts):
        todo = [i for i in range(len(cells)) if not accepted[i]]
        if not todo:
            break
        chosen = [cells[i] for i in todo]
        initial = noise_images(chosen, [attempt] * len(chosen), shape)
        result = synthesize_batch(models, torch.tensor(chosen), initial, options, seed=attempt)
        for row, index in enumerate(todo):
            score = float(result.hard[row]) if not result.failures[row] else -1.0
            if score > hard[index]:
                hard[index], images[index] = score, result.images[row]
            accepted[index] = bool(hard[index] >= options.threshold)
    return {"images": images, "hard": hard, "accepted": accepted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=PAIRS, help="comma-separated model_a:model_b")
    parser.add_argument("--priors", default=",".join(PRIORS), help=f"comma-separated, of {', '.join(PRIORS)}")
    parser.add_argument("--classes", default="mnist=0-9,cifar10=0-9", help="per dataset, e.g. mnist=0,1,7 or 0-4")
    parser.add_argument("--max-steps", type=int, default=1000, help="synthesis steps per attempt at most")
    parser.add_argument("--attempts", type=int, default=5, help="failed cells are retried with new seeds")
    parser.add_argument("--grids", default="docs/img/priors", help="folder of the grids ('' for none)")
    args = parser.parse_args()
    from controversial.synthesis.naturalness import naturalness

    torch.set_grad_enabled(True)
    classes: dict[str, list[int]] = {}
    for part in args.classes.split(","):
        if "=" in part:
            dataset, _, spec = part.partition("=")
            classes[dataset] = []
        else:
            spec = part
        low, _, high = spec.partition("-")
        classes[dataset] += list(range(int(low), int(high) + 1)) if high else [int(low)]
    priors = args.priors.split(",")
    print(
        f"priors benchmark: max_steps={args.max_steps}, attempts={args.attempts}, threshold "
        f"{SynthesisOptions().threshold}, cells: every ordered pair among the classes "
        + "; ".join(f"{d} {v}" for d, v in classes.items())
        + f"; torch threads {torch.get_num_threads()}"
    )
    for prior in priors:
        print(f"  {prior}: {PRIORS[prior] or 'the defaults'}")
    header = "| pair | prior | accepted | median hard | KID x1e3 (n) | floor / ceiling | seconds | goal |"
    print(header + "\n|---|---|---|---|---|---|---|---|")
    for pair in args.pairs.split(","):
        name_a, name_b = pair.split(":")
        models = [load_model(name_a), load_model(name_b)]
        dataset = models[0].dataset
        cells = ordered_class_pairs(classes[dataset])
        pixel_kid: float | None = None
        for prior in priors:
            options = prior_options(prior, dataset, args.max_steps)
            start = time.perf_counter()
            out = synthesize_cells(models, cells, options, args.attempts)
            seconds = time.perf_counter() - start
            kept = out["images"][out["accepted"]]
            n = len(kept)
            measured = naturalness(kept, dataset) if n >= 2 else None
            kid = measured.kid if measured else float("nan")
            if prior == "pixel":
                pixel_kid = kid
            share = float(out["accepted"].float().mean())
            goal = (
                "-"
                if prior == "pixel" or pixel_kid is None
                else ("yes" if share >= 0.8 and measured is not None and kid <= pixel_kid / 2 else "no")
            )
            bounds = f"{measured.floor:.0f} / {measured.ceiling:.0f}" if measured else "-"
            print(
                f"| {name_a}-{name_b} | {prior} | {int(out['accepted'].sum())}/{len(cells)} | "
                f"{statistics.median(out['hard'].tolist()):.3f} | {kid:.0f} ({n}) | {bounds} | "
                f"{seconds:.0f} | {goal} |",
                flush=True,
            )
            if args.grids:
                Path(args.grids).mkdir(parents=True, exist_ok=True)
                save_image(
                    out["images"], Path(args.grids) / f"{name_a}-{name_b}_{prior}.png", nrow=len(cells), padding=1
                )


if __name__ == "__main__":
    main()
