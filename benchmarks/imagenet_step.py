"""Time per synthesis step at 224 px for ImageNet models on the 16 entry-level categories, on this machine.

Each model is a timm architecture with random weights (the cost of a step does not depend on the weights;
nothing is downloaded) behind the ImageNet mean/std standardisation and the 16-category readout
(``ImageNet16Readout``), wrapped as a calibrated model, as an imported ImageNet model is.

Part 1: each model alone, forward and backward to the input (a synthesis step's model cost) at each batch
size: median ms per step over ``--repeats`` after one warm-up call, and ms per image.

Part 2: the pair in the synthesis engine (``synthesize_batch``, the ``lse`` objective, Adam) with each
parametrisation that suits large images, for ``--steps`` steps (early stopping off) after a first step:
median seconds per step (the whole step: parametrisation, jitter, both models, optimiser, bookkeeping),
the share of the run's steps spent inside the models' forward and backward, and the parametrisation's
own cost per step (parameters to images, jitter, and the backward through them; median of ``--repeats``).

    python benchmarks/imagenet_step.py                                 # about 1.5 min on 2 cores
    python benchmarks/imagenet_step.py --batches 8 --device cuda       # on a GPU
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from torch import nn

from controversial.synthesis.engine import noise_images, ordered_class_pairs, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.parametrization import parametrization
from controversial.synthesis.transforms import jitter
from controversial.zoo.imagenet16 import IMAGENET16_CLASSES, ImageNet16Readout
from controversial.zoo.readout import CalibratedModel, Calibration

SHAPE = (3, 224, 224)
# name -> synthesis options besides the step count: the paper's sigmoid pixels, and the decorrelated
# spectrum with and without a few pixels of jitter per step
PARAMETRIZATIONS = {
    "pixel": {"parametrization": "pixel"},
    "fourier": {"parametrization": "fourier"},
    "fourier + jitter 8": {"parametrization": "fourier", "jitter": 8},
}


class Standardise(nn.Module):
    """[0, 1] images -> ImageNet-standardised input, as the import wrapper applies it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_DEFAULT_MEAN).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(IMAGENET_DEFAULT_STD).view(1, 3, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - self.mean) / self.std


def imagenet16_model(arch: str, device: torch.device) -> CalibratedModel:
    net = nn.Sequential(Standardise(), timm.create_model(arch, pretrained=False), ImageNet16Readout())
    model = CalibratedModel(net, Calibration(1.0, 0.0, "identity"), arch, "imagenet16", IMAGENET16_CLASSES)
    return model.to(device).eval().requires_grad_(False)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def model_step_ms(model: CalibratedModel, batch: int, repeats: int, device: torch.device) -> float:
    """Median ms of one forward and backward to the input at ``batch``."""
    images = torch.rand(batch, *SHAPE, device=device)
    times = []
    for _ in range(repeats + 1):  # the first call warms up (allocations, kernels)
        x = images.clone().requires_grad_(True)
        sync(device)
        start = time.perf_counter()
        model(x)[:, 0].sum().backward()
        sync(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def engine_step(models: list[CalibratedModel], batch: int, steps: int, extra: dict, device: torch.device):
    """(median seconds per step, share inside the models) over ``steps`` engine steps after a first one."""
    cells = ordered_class_pairs(len(IMAGENET16_CLASSES))[:batch]
    targets = torch.tensor(cells, device=device)
    images = noise_images(cells, [0] * batch, SHAPE).to(device)
    options = SynthesisOptions(max_steps=steps + 1, stop_score=None, patience=10**9, **extra)
    ends = []  # when each step ended; the first step (warm-up) and the final scoring are left out

    def on_step(step: int, active: int) -> None:
        sync(device)
        ends.append(time.perf_counter())

    start = time.perf_counter()
    result = synthesize_batch(models, targets, images, options, on_step=on_step)
    per_step = statistics.median(b - a for a, b in zip(ends, ends[1:]))
    return per_step, result.model_seconds / (ends[-1] - start)


def parametrization_ms(batch: int, extra: dict, repeats: int, device: torch.device) -> float:
    """Median ms of the parametrisation's own share of a step: parameters -> images (-> jitter), and back."""
    options = SynthesisOptions(**extra)
    param = parametrization(options, SHAPE)
    params = param.from_images(torch.rand(batch, *SHAPE, device=device)).requires_grad_(True)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        jitter(param.to_images(params), options.jitter, generator).sum().backward()
        sync(device)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,vit_tiny_patch16_224", help="two timm architectures")
    parser.add_argument("--batches", default="8,32", help="batch sizes (synthesis elements per step)")
    parser.add_argument("--repeats", type=int, default=3, help="part 1: timed calls per model and batch")
    parser.add_argument("--steps", type=int, default=2, help="part 2: engine steps per configuration")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    batches = [int(b) for b in args.batches.split(",")]
    models = [imagenet16_model(arch, device) for arch in args.models.split(",")]
    print(
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, torch "
        f"{torch.__version__}, timm {timm.__version__}, device {device}; random weights, float32, {SHAPE} images"
    )

    print("\nPart 1: one model, forward + backward to the input (median of", args.repeats, "after a warm-up)\n")
    print("| model | params (M) | batch | ms per step | ms per image |")
    print("|---|---|---|---|---|")
    for model in models:
        params = sum(p.numel() for p in model.parameters()) / 1e6
        for batch in batches:
            ms = model_step_ms(model, batch, args.repeats, device)
            print(f"| {model.name} | {params:.1f} | {batch} | {ms:.0f} | {ms / batch:.1f} |", flush=True)

    print(f"\nPart 2: the pair {' vs '.join(m.name for m in models)} in the engine, median of {args.steps} steps\n")
    print("| parametrisation | batch | s per step | ms per image | in the models | parametrisation alone (ms) |")
    print("|---|---|---|---|---|---|")
    for name, extra in PARAMETRIZATIONS.items():
        for batch in batches:
            seconds, share = engine_step(models, batch, args.steps, extra, device)
            own = parametrization_ms(batch, extra, args.repeats, device)
            per_image = 1000 * seconds / batch
            print(f"| {name} | {batch} | {seconds:.2f} | {per_image:.0f} | {share:.0%} | {own:.1f} |", flush=True)


if __name__ == "__main__":
    main()
