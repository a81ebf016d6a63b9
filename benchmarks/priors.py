"""Image priors side by side: every parametrisation on the same model pairs, in one run.

For each pair (three MNIST, two CIFAR-10 by default) and each parametrisation (``PRIORS`` below: the
paper's pixels, the Fourier spectrum, the CPPN and the bundled generator's latent space) the script
synthesizes the same cells from the same noise starts (and the pixel row once more from test images, the
start ``synthesize.py`` gives a pair whose model declares ``synthesis_init: test_image``), retries failed
cells with new seeds as ``synthesize.py`` does, and prints per row: cells accepted at ``threshold`` (scored
in float32 on the 8-bit image, as always), the median hard score, KID x 10^3 of the accepted stimuli to the
test images (with the floor and the noise ceiling of the measure), and the seconds it took. A last column
says whether a prior meets the issue's goal on that pair: at least 80% of the cells accepted with a KID at
most half that of the pixel stimuli from noise. One grid per pair and parametrisation goes to ``--grids`` (default
docs/img/priors/): one row per class of model A, one image per cell (model B's class in increasing order
without A's), at twice the native size.

CPU time is scarce, so ``--classes`` (per dataset) chooses the cells (all ordered pairs among those
classes), and ``--max-steps`` / ``--attempts`` bound the work; the output states exactly what was run.
Run with ``CONTROVERSIAL_DATA_ROOT`` set (the KDE and the KID need the data).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torchvision.utils import save_image

from controversial.datasets import DataOptions, dataset_info
from controversial.synthesis.engine import ordered_class_pairs, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.runstate import Element
from controversial.synthesis.starts import initial_images
from controversial.zoo.bundled import load_model

PAIRS = "abs:vgg,vgg:madry_l2,kde:capsnet,vgg16:robust_l2,wrn:jem"
PRIORS: dict[str, dict[str, Any]] = {
    "pixel": {},
    "pixel_test_image": {"init": "test_image"},
    "fourier": {"parametrization": "fourier", "jitter": 1},
    "cppn": {"parametrization": "cppn", "jitter": 1, "scale": 0.05, "rotate": 5, "patience": 50},
    "generator": {"parametrization": "generator", "generator": {"name": "{dataset}/vae", "truncation": 4.0}},
    "generator_residual": {
        "parametrization": "generator",
        "generator": {"name": "{dataset}/vae", "truncation": 4.0, "residual": 0.25},
    },
}
"""The synthesis options of each parametrisation (``{dataset}`` is the pair's); the rest are the defaults.
``init`` is where a row starts (``synthesis/starts.py``; default noise): ``pixel_test_image`` is the pixel
synthesis a pair with ``synthesis_init: test_image`` gets from ``synthesize.py``, shown beside the rows from noise
(the goal column compares with the pixel row from noise, the start every prior shares)."""


def prior_options(prior: str, dataset: str, max_steps: int) -> SynthesisOptions:
    overrides = {k: v for k, v in PRIORS[prior].items() if k not in ("generator", "init")}
    if "generator" in PRIORS[prior]:
        generator = PRIORS[prior]["generator"]
        overrides["generator"] = {**generator, "name": generator["name"].format(dataset=dataset)}
    return SynthesisOptions(max_steps=max_steps, **overrides)


def synthesize_cells(
    models: list, cells: list[tuple[int, int]], options: SynthesisOptions, attempts: int, init: str
) -> dict:
    """Every cell from seed 0's start (``init``), failed cells again from seeds 1, 2, ...: per cell the accepted
    image (or the best-scoring one), its hard score, and whether it was accepted."""
    shape = dataset_info(models[0].dataset).image_shape
    data, names = DataOptions(download=False), (models[0].name, models[1].name)
    images = torch.zeros(len(cells), *shape)
    hard = torch.full((len(cells),), -1.0)
    accepted = torch.zeros(len(cells), dtype=torch.bool)
    for attempt in range(attempts):
        todo = [i for i in range(len(cells)) if not accepted[i]]
        if not todo:
            break
        chosen = [cells[i] for i in todo]
        elements = [Element(a, b, attempt) for a, b in chosen]
        initial, _ = initial_images(elements, shape, init, models[0].dataset, data, names)
        result = synthesize_batch(models, torch.tensor(chosen), initial, options, seed=attempt)
        for row, index in enumerate(todo):
            score = float(result.hard[row]) if not result.failures[row] else -1.0
            if score > hard[index]:
                hard[index], images[index] = score, result.images[row]
            accepted[index] = bool(hard[index] >= options.threshold)
    return {"images": images, "hard": hard, "accepted": accepted}


def parse_classes(spec: str) -> dict[str, list[int]]:
    """``mnist=0-4,cifar10=0,3,5`` -> {"mnist": [0, 1, 2, 3, 4], "cifar10": [0, 3, 5]}."""
    classes: dict[str, list[int]] = {}
    dataset = ""
    for part in spec.split(","):
        if "=" in part:
            dataset, _, part = part.partition("=")
            classes[dataset] = []
        low, _, high = part.partition("-")
        classes[dataset] += list(range(int(low), int(high) + 1)) if high else [int(low)]
    return classes


def stored(store: Path, key: str) -> bool:
    return store.is_file() and key in torch.load(store, weights_only=True)


def run_or_reuse(store: Path, key: str, work) -> dict:
    """``work()``'s result, kept in ``store`` under ``key``: a killed run resumes at the next pair and prior."""
    done = torch.load(store, weights_only=True) if store.is_file() else {}
    if key not in done:
        start = time.perf_counter()
        out = work()
        out["seconds"] = time.perf_counter() - start
        done[key] = out
        store.parent.mkdir(parents=True, exist_ok=True)
        torch.save(done, store.with_suffix(".tmp"))
        store.with_suffix(".tmp").replace(store)
    return done[key]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=PAIRS, help="comma-separated model_a:model_b")
    parser.add_argument("--priors", default=",".join(PRIORS), help=f"comma-separated, of {', '.join(PRIORS)}")
    parser.add_argument("--classes", default="mnist=0-9,cifar10=0-9", help="per dataset, e.g. mnist=0,1,7 or 0-4")
    parser.add_argument("--max-steps", type=int, default=1000, help="synthesis steps per attempt at most")
    parser.add_argument("--attempts", type=int, default=5, help="failed cells are retried with new seeds")
    parser.add_argument("--grids", default="docs/img/priors", help="folder of the grids ('' for none)")
    parser.add_argument(
        "--store", default="outputs/benchmarks/priors.pt", help="finished rows are kept here; a re-run reuses them"
    )
    parser.add_argument("--stored-only", action="store_true", help="print the stored rows only; synthesize nothing")
    args = parser.parse_args()
    torch.set_grad_enabled(True)
    classes = parse_classes(args.classes)
    priors = args.priors.split(",")
    print(
        f"priors benchmark: max_steps={args.max_steps}, attempts={args.attempts}, threshold "
        f"{SynthesisOptions().threshold}, cells: every ordered pair among the classes "
        + "; ".join(f"{d} {v}" for d, v in classes.items())
        + f"; torch threads {torch.get_num_threads()}"
    )
    for prior in priors:
        print(f"  {prior}: {PRIORS[prior] or 'the defaults'}")
    results = []
    for pair in args.pairs.split(","):
        name_a, name_b = pair.split(":")
        models = [load_model(name_a), load_model(name_b)]
        dataset = models[0].dataset
        cells = ordered_class_pairs(classes[dataset])
        for prior in priors:
            options = prior_options(prior, dataset, args.max_steps)
            init = PRIORS[prior].get("init", "noise")
            key = f"{pair}|{prior}|{cells}|{options.model_dump_json()}|{args.attempts}"
            if args.stored_only and not stored(Path(args.store), key):
                print(f"  not run: {pair} {prior} (--stored-only and no stored row)", flush=True)
                continue
            out = run_or_reuse(
                Path(args.store), key, lambda: synthesize_cells(models, cells, options, args.attempts, init)
            )
            print(f"  done: {pair} {prior} ({out['seconds']:.0f} s)", flush=True)
            results.append((name_a, name_b, dataset, prior, len(cells), out))
            if args.grids:
                Path(args.grids).mkdir(parents=True, exist_ok=True)
                grid = Path(args.grids) / f"{name_a}-{name_b}_{prior}.png"
                doubled = torch.nn.functional.interpolate(out["images"], scale_factor=2, mode="nearest")
                save_image(doubled, grid, nrow=len(classes[dataset]) - 1, padding=2)
    print_table(results)
    from controversial.synthesis.naturalness import classes_floor

    for dataset in sorted({r[2] for r in results}):
        chosen = classes[dataset]
        if len(chosen) < len(dataset_info(dataset).class_names):  # the stored floor is of every class
            n = len(ordered_class_pairs(chosen))
            floor = classes_floor(dataset, chosen, n)
            print(f"real {dataset} test images of classes {chosen} alone ({n}): KID {floor:.0f}")


def print_table(results: list) -> None:
    """The table, with KID measured on the accepted stimuli of each row."""
    from controversial.synthesis.naturalness import naturalness

    header = "| pair | prior | accepted | median hard | KID x1e3 +- sd (n) | floor / ceiling | seconds | goal |"
    print(header + "\n|---|---|---|---|---|---|---|---|")
    pixel_kid: dict[str, float] = {}
    for name_a, name_b, dataset, prior, n_cells, out in results:
        kept = out["images"][out["accepted"]]
        measured = naturalness(kept, dataset) if len(kept) >= 2 else None
        kid = measured.kid if measured else float("nan")
        spread = f" +- {measured.kid_std:.0f}" if measured else ""
        pair = f"{name_a}-{name_b}"
        if prior == "pixel":
            pixel_kid[pair] = kid
        share = float(out["accepted"].float().mean())
        goal = "-"
        if prior not in ("pixel", "pixel_test_image") and pair in pixel_kid:
            goal = "yes" if share >= 0.8 and measured is not None and kid <= pixel_kid[pair] / 2 else "no"
            if share >= 0.8 and math.isnan(pixel_kid[pair]):
                goal = "n/a: no pixel stimuli to compare"
        bounds = f"{measured.floor:.0f} / {measured.ceiling:.0f}" if measured else "-"
        print(
            f"| {pair} | {prior} | {int(out['accepted'].sum())}/{n_cells} | "
            f"{statistics.median(out['hard'].tolist()):.3f} | {kid:.0f}{spread} ({len(kept)}) | {bounds} | "
            f"{out['seconds']:.0f} | {goal} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
