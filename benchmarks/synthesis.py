"""Batched synthesis vs one class pair at a time (the public tutorial's way), side by side.

For each model pair: seconds for the full 90-cell matrix with the batched engine (one attempt, no
retries), the same settings run one cell at a time on a stated subset of cells and scaled to 90,
their ratio, and the share of time spent inside model forward/backward.

    python benchmarks/synthesis.py                       # abs-vgg and vgg-kde, 9 one-at-a-time cells
    python benchmarks/synthesis.py --pairs abs:vgg --subset 18 --max-steps 1000
"""
from __future__ import annotations

import argparse
import time

import torch

from controversial.data import dataset_info
from controversial.synthesis import SynthesisSettings, noise_images, ordered_class_pairs, synthesize_batch
from controversial.zoo import load_model


def run_cells(models, cells: list[tuple[int, int]], settings: SynthesisSettings) -> tuple[float, float, int]:
    targets = torch.tensor(cells)
    initial = noise_images(cells, [0] * len(cells), dataset_info(models[0].dataset).image_shape)
    result = synthesize_batch(models, targets, initial, settings)
    return result.total_seconds, result.model_seconds, int((result.hard >= settings.threshold).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="abs:vgg,vgg:kde", help="comma-separated model_a:model_b pairs")
    parser.add_argument("--subset", type=int, default=9, help="cells timed one at a time (scaled to 90)")
    parser.add_argument("--max-steps", type=int, default=1000)
    args = parser.parse_args()
    settings = SynthesisSettings(max_steps=args.max_steps)
    pairs = ordered_class_pairs()
    subset = pairs[:: len(pairs) // args.subset][: args.subset]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; settings: {settings.max_steps} steps max, "
          f"stop_score {settings.stop_score}, threshold {settings.threshold}; one-at-a-time timed on {len(subset)} cells, scaled x{90 / len(subset):.1f}")
    header = f"| {'pair':<10} | {'batched 90 cells (s)':>20} | {'accepted':>8} | {'model fwd/bwd share':>19} | {'one at a time, 90 (s)':>21} | {'speed-up':>8} |"
    lines = [header, "|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|"]
    for pair in args.pairs.split(","):
        name_a, name_b = pair.split(":")
        models = [load_model(name_a), load_model(name_b)]
        batched, model_time, accepted = run_cells(models, pairs, settings)
        single_start = time.perf_counter()
        for cell in subset:
            run_cells(models, [cell], settings)
        single = (time.perf_counter() - single_start) * len(pairs) / len(subset)
        lines.append(f"| {name_a + '-' + name_b:<10} | {batched:>20.1f} | {accepted:>5}/90 | {100 * model_time / batched:>18.0f}% | {single:>21.1f} | {single / batched:>7.1f}x |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
