"""KID x 10^3 of reference stimulus sets, side by side: the bundled feature networks' floor and ceiling, the
PNAS 2020 release's natural and controversial images (its sample under the data root's ``pnas2020/``), and
the accepted stimuli of any run dirs given, with the seconds the measure took.

    python benchmarks/naturalness.py [RUN_DIR ...]

The release stores Experiment 1 as displayed (dark digits on white), so its images are inverted, as the models
read them; Experiment 2's repeated presentations (the same pixels) are counted once.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from controversial.datasets import default_data_root
from controversial.records.manifest import MANIFEST_NAME, read_manifest
from controversial.synthesis.naturalness import naturalness, stimulus_images


def load(paths: list[Path], invert: bool) -> torch.Tensor:
    arrays = []
    for path in paths:
        array = np.asarray(Image.open(path), dtype=np.float32) / 255
        array = array[None] if array.ndim == 2 else array[..., :3].transpose(2, 0, 1)
        arrays.append(1 - array if invert else array)
    return torch.from_numpy(np.stack(arrays))


def pnas_sets(root: Path) -> list[tuple[str, str, torch.Tensor]]:
    """(name, dataset, images) of the release's sample: natural and controversial images of both experiments."""
    one = sorted((root / "experiment_1_sample").glob("*.png"))
    two = [p for p in sorted((root / "experiment_2_sample").glob("*.png")) if "_repeated" not in p.name]
    natural_one = [p for p in one if p.name.startswith("MNIST_")]
    natural_two = [p for p in two if p.name.startswith("CIFAR_10_test")]
    return [
        ("PNAS 2020 Exp. 1 natural", "mnist", load(natural_one, True)),
        ("PNAS 2020 Exp. 1 controversial", "mnist", load([p for p in one if p not in natural_one], True)),
        ("PNAS 2020 Exp. 2a natural", "cifar10", load(natural_two, False)),
        ("PNAS 2020 Exp. 2a controversial", "cifar10", load([p for p in two if p not in natural_two], False)),
    ]


def run_sets(run_dirs: list[Path]) -> list[tuple[str, str, torch.Tensor]]:
    sets = []
    for run_dir in run_dirs:
        rows = [r for r in read_manifest(run_dir / MANIFEST_NAME) if r.accepted]
        if rows:
            sets.append(
                (
                    f"{rows[0].model_a} vs {rows[0].model_b} ({run_dir.name})",
                    rows[0].dataset,
                    stimulus_images(run_dir, rows),
                )
            )
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="*", type=Path, help="synthesize.py run dirs (their accepted stimuli)")
    parser.add_argument("--pnas", type=Path, default=Path(default_data_root()) / "pnas2020")
    args = parser.parse_args()
    sets = (pnas_sets(args.pnas) if args.pnas.is_dir() else []) + run_sets(args.run_dirs)
    print("| set | dataset | images | KID x 10^3 | +- std | floor (real) | ceiling (noise) | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for name, dataset, images in sets:
        start = time.perf_counter()
        measured = naturalness(images, dataset)
        seconds = time.perf_counter() - start
        print(
            f"| {name} | {dataset} | {len(images)} | {measured.kid:.0f} | {measured.kid_std:.0f} | "
            f"{measured.floor:.1f} | {measured.ceiling:.0f} | {seconds:.2f} |"
        )


if __name__ == "__main__":
    main()
