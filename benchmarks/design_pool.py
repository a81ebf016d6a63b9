"""The candidate pool for ``benchmarks/design.py``: controversial stimuli of every MNIST model pair plus
natural test images, with every model's calibrated probabilities, cached as one ``.npz``.

Per unordered pair of the nine models, every cell a sweep synthesises is synthesised (one seed each,
batched): the 90 ordered class pairs (a, b), a != b, listed by offset b - a (mod 10) so that the first
20 are the paper's balanced ones (every class twice per side: b = a+1 and a+5). ``--offsets 1 5 3``
gives the 30-cell pool of the benchmark runs before 2026-11-26, which capped any pair at 30 stimuli.
Synthesis runs the project's engine with the paper's settings except ``max_steps`` (default 300, a
CPU budget; ``stop_score`` 0.9 as in ``synthesize.py``).
Natural images: ``--natural-per-class`` random test images per class. Then all nine models rate
every image (``evaluate.py``'s code path).

    python benchmarks/design_pool.py [--out outputs/design/pool.npz] [--max-steps 300] [--offsets 1 5 3 ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controversial.analysis.model_responses import probabilities as model_probabilities  # noqa: E402
from controversial.data import load_uint8  # noqa: E402
from controversial.synthesis.engine import SynthesisSettings, noise_images, synthesize_batch  # noqa: E402
from controversial.zoo.bundled import load_model  # noqa: E402

MODELS = ("vgg", "vgg_neg", "capsnet", "pcn", "madry_linf", "madry_l2", "capsnet_recon", "kde", "abs")
OFFSETS = (1, 5, 3, 2, 4, 6, 7, 8, 9)  # b = a + offset (mod 10); the first two give the paper's balanced 20


def pair_cells(offsets: tuple[int, ...]) -> list[tuple[int, int]]:
    """Ten ordered class pairs per offset: each class is each side's target once per offset."""
    return [(a, (a + d) % 10) for d in offsets for a in range(10)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "outputs" / "design" / "pool.npz"))
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument(
        "--offsets", type=int, nargs="+", default=OFFSETS, help="class offsets b - a to synthesise; must start with 1 5"
    )
    parser.add_argument("--natural-per-class", type=int, default=50)
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if list(args.offsets[:2]) != [1, 5] or not set(args.offsets) <= set(range(1, 10)):
        parser.error(f"--offsets must start with 1 5 (the paper's balanced cells) and lie in 1..9, got {args.offsets}")
    torch.set_num_threads(1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    models = {name: load_model(name, "mnist", None, args.data_root) for name in MODELS}
    for model in models.values():
        model.eval()
    settings = SynthesisSettings(max_steps=args.max_steps)
    cells = pair_cells(tuple(args.offsets))
    images, pairs, classes, hard = [], [], [], []
    start = time.perf_counter()
    for i, (a, b) in enumerate(combinations(MODELS, 2)):
        targets = torch.tensor(cells)
        initial = noise_images(cells, [args.seed + i] * len(cells), (1, 28, 28))
        result = synthesize_batch([models[a], models[b]], targets, initial, settings, seed=args.seed + i)
        images.append(result.images)
        pairs += [(MODELS.index(a), MODELS.index(b))] * len(cells)
        classes += cells
        hard.append(result.hard)
        print(
            f"{a} vs {b}: {int((result.hard >= 0.75).sum())}/{len(cells)} at >= 0.75, "
            f"{result.total_seconds:.0f} s (total {time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    test_images, test_labels = load_uint8("mnist", "test", args.data_root, False)
    rng = np.random.default_rng(args.seed)
    natural = np.sort(
        np.concatenate(
            [
                rng.choice(np.flatnonzero(test_labels.numpy() == c), args.natural_per_class, replace=False)
                for c in range(10)
            ]
        )
    )
    all_images = torch.cat([*images, test_images[natural].float() / 255.0])
    probabilities = []
    for name, model in models.items():
        t0 = time.perf_counter()
        probabilities.append(model_probabilities([model], all_images.numpy(), 256)[0])
        print(f"evaluated {name} on {len(all_images)} images ({time.perf_counter() - t0:.0f} s)", flush=True)
    n_syn = len(pairs)
    np.savez_compressed(
        out,
        models=np.array(MODELS),
        probabilities=np.stack(probabilities).astype(np.float32),
        pairs=np.array(pairs + [(-1, -1)] * len(natural)),
        classes=np.array(classes + [(-1, -1)] * len(natural)),
        hard=np.concatenate([torch.cat(hard).numpy(), np.full(len(natural), np.nan)]),
        true_class=np.concatenate([np.full(n_syn, -1), test_labels.numpy()[natural]]),
        test_index=np.concatenate([np.full(n_syn, -1), natural]),
        images=(all_images * 255).round().to(torch.uint8).numpy(),
        max_steps=args.max_steps,
    )
    print(f"wrote {out}: {n_syn} synthetic + {len(natural)} natural ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
