"""How natural a stimulus set looks: its Kernel Inception Distance (KID) to the dataset's test images.

KID (Bińkowski et al. 2018; METHODS.md section 7) is the unbiased squared MMD between two sets of features
under the cubic polynomial kernel, so unlike FID it has no bias at the 90 stimuli of a model pair. The
estimator and its subset sampling are torchmetrics' ``KernelInceptionDistance``; the features are those of one
fixed *feature network* per dataset, a small classifier trained here (``python train.py model=features/mnist``,
``conf/model/features/``): the input of its last linear layer. Its checkpoint (``models/features/<dataset>.pt``,
never a model of a synthesis pair) also holds the features of a fixed sample of test images (the reference),
and two baselines scored exactly like a stimulus set: the *floor*, real test images that are not in the
reference, and the *ceiling*, uniform noise. So KID needs no dataset at run time.

Values are KID x 10^3. Subsets: the metric's mean and standard deviation over 100 subsets of
``min(n_images, n_reference, 1000)`` images from each side (for 90 stimuli: all 90 against 90 reference images
drawn anew per subset), with a fixed seed, so a stimulus set always gets the same number.
"""

from __future__ import annotations

import functools
import hashlib
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from torch import nn

from controversial.datasets import DATASETS, DatasetInfo, dataset_info, same_dataset
from controversial.errors import UserError
from controversial.options import Options
from controversial.records.manifest import ManifestRow
from controversial.synthesis.stimuli import load_png

SUBSETS = 100
MAX_SUBSET_SIZE = 1000
REFERENCE_IMAGES = 2000  # test images whose features are the reference (seeded draw, stored in the checkpoint)
BASELINE_IMAGES = 90  # images per draw of the floor and the ceiling: a model pair's stimulus count
BASELINE_DRAWS = 10  # the floor and the ceiling are means over this many draws
FEATURE_BATCH = 500
NATURALNESS_NAME = "naturalness.json"  # a run dir's record of its accepted stimuli's KID


@dataclass(frozen=True)
class Naturalness:
    """KID x 10^3 of a stimulus set, with what real images and uniform noise score beside it."""

    kid: float  # KID x 10^3 of the images against the dataset's reference test images
    kid_std: float  # its standard deviation over subsets (x 10^3)
    floor: float  # KID x 10^3 of held-out real test images (what real images score)
    ceiling: float  # KID x 10^3 of uniform-noise images (what noise scores)

    def text(self) -> str:
        """``KID 687 (real 0, noise 1469)``: the short form of summary lines and tables."""
        return f"KID {round(self.kid)} (real {round(self.floor)}, noise {round(self.ceiling)})"  # ints: never "-0"


class NaturalnessUnavailable(UserError):
    """KID cannot be measured for this set: no feature network for its dataset, or too few images."""


class NaturalnessOptions(Options):
    """The naturalness measure reported beside a stimulus set (KID against the dataset's test images)."""

    measure: bool = Field(True, description="report the KID of the accepted stimuli (false: skip it)")
    features: str | None = Field(
        None,
        description="feature network file for KID (trained by train.py model=features/<name>); default: the "
        "bundled models/features/<dataset>.pt of MNIST and CIFAR-10; another dataset without one reports KID "
        "as unavailable",
    )


@dataclass(frozen=True)
class FeatureNetwork:
    """A dataset's fixed feature network with its reference statistics, as loaded from its checkpoint."""

    net: nn.Module  # a classifier; its features are the input of its last linear layer
    dataset: DatasetInfo
    reference: torch.Tensor  # (n, d) float32 features of the reference test images
    floor: float
    ceiling: float
    path: Path
    reference_seed: int = 0  # the seed of the draw of the reference test images (reference_statistics)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The (N, d) features of images in [0, 1], read as their 8-bit versions (what people see)."""
        return penultimate_features(self.net, quantized(images))


def quantized(images: torch.Tensor) -> torch.Tensor:
    """Images in [0, 1] rounded to 8 bits, as float32."""
    return (images.float().clamp(0, 1) * 255).round() / 255


def penultimate_features(net: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The input of ``net``'s last linear layer (a classifier's penultimate representation), in batches, scaled to
    length sqrt(d): then x.y / d is the cosine of two images' features, and the cubic kernel (x.y / d + 1)^3 lies
    in [0, 8], so a stimulus set's KID x 10^3 is at most 16,000. Unscaled, the kernel would be ruled by the size
    of the activations (noise's are three times a digit's, and its KID a hundred thousand times)."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise UserError(f"{type(net).__name__} has no linear layer whose input could serve as features")
    captured: list[torch.Tensor] = []
    hook = linears[-1].register_forward_hook(lambda module, inputs, output: captured.append(inputs[0].flatten(1)))
    try:
        with torch.inference_mode():
            for start in range(0, len(images), FEATURE_BATCH):
                net(images[start : start + FEATURE_BATCH])
    finally:
        hook.remove()
    features = torch.cat(captured).float()
    return nn.functional.normalize(features, dim=1) * features.shape[1] ** 0.5


def kid(features: torch.Tensor, reference: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """torchmetrics' unbiased KID (mean, std over subsets) x 10^3 of two feature sets; the subsets are seeded.

    The features are extracted beforehand (the reference ships as features), so the metric's feature module is
    the identity; torchmetrics supplies the estimator and the subset sampling."""
    from torchmetrics.image.kid import KernelInceptionDistance

    size = min(len(features), len(reference), MAX_SUBSET_SIZE)
    if size < 2:
        raise NaturalnessUnavailable(f"KID needs at least 2 images on each side, got {len(features)}")
    with warnings.catch_warnings():  # its note that features are kept in memory: 90 x d of them here
        warnings.simplefilter("ignore", UserWarning)
        metric = KernelInceptionDistance(feature=nn.Identity(), subsets=SUBSETS, subset_size=size)
    metric.update(reference.double(), real=True)
    metric.update(features.double(), real=False)
    with torch.random.fork_rng(devices=[]):  # its subsets use the global generator: seed it, restore it after
        torch.manual_seed(seed)
        mean, std = metric.compute()
    return 1000 * float(mean), 1000 * float(std)


def _reference_split(n_test: int, n_reference: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The indices of the test images drawn as the reference, and of the rest (where floors are drawn): the
    first ``n_reference`` of a seeded permutation, so ``classes_floor`` can redraw the split from the seed."""
    order = torch.randperm(n_test, generator=generator)
    return order[:n_reference], order[n_reference:]


def reference_statistics(
    net: nn.Module, test_images: torch.Tensor, seed: int = 0, draws: int = BASELINE_DRAWS
) -> dict[str, Any]:
    """What a feature network's checkpoint stores beside its weights: the features of ``REFERENCE_IMAGES`` test
    images (a seeded draw; float16, as stored), and the floor and ceiling scored against them.

    The floor is the mean KID of ``draws`` draws of ``BASELINE_IMAGES`` test images outside the
    reference; the ceiling likewise for uniform noise. ``test_images`` are in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    n_reference = min(REFERENCE_IMAGES, len(test_images) - BASELINE_IMAGES)
    if n_reference < BASELINE_IMAGES:
        raise UserError(f"a feature network's reference needs at least {2 * BASELINE_IMAGES} test images")
    chosen, held_out = _reference_split(len(test_images), n_reference, generator)
    net = net.eval()
    reference = penultimate_features(net, quantized(test_images[chosen])).half()
    floors, ceilings = [], []
    for draw in range(draws):
        picks = held_out[torch.randperm(len(held_out), generator=generator)[:BASELINE_IMAGES]]
        real = penultimate_features(net, quantized(test_images[picks]))
        noise = torch.rand((BASELINE_IMAGES, *test_images.shape[1:]), generator=generator)
        floors.append(kid(real, reference.float(), seed + draw)[0])
        ceilings.append(kid(penultimate_features(net, quantized(noise)), reference.float(), seed + draw)[0])
    return {
        "reference_features": reference,
        "reference_seed": seed,
        "floor": sum(floors) / len(floors),
        "ceiling": sum(ceilings) / len(ceilings),
    }


def feature_network_file(dataset: DatasetInfo, options: NaturalnessOptions | None = None) -> Path:
    """The feature network for ``dataset``: the one the options name, else the bundled one of a built-in."""
    from controversial.zoo.bundled import feature_network_path

    if options is not None and options.features is not None:
        return Path(options.features)
    if dataset.source or dataset.name not in DATASETS:
        raise NaturalnessUnavailable(
            f"no feature network for dataset '{dataset.name}': KID needs one trained on its images, named with "
            "naturalness.features=<file> (a checkpoint with reference features, as train.py writes for a model of "
            "purpose: features; docs/synthesis.md)"
        )
    path = feature_network_path(dataset.name)
    if not path.is_file():
        raise NaturalnessUnavailable(
            f"the feature network {path} is missing; train it with python train.py model=features/{dataset.name}"
        )
    return path


def load_feature_network(path: Path) -> FeatureNetwork:
    """A feature network's checkpoint (trusted as any checkpoint: weights only, a registered architecture),
    loaded once per process while the file stays the same."""
    if not path.is_file():
        raise NaturalnessUnavailable(f"no feature network at {path}")
    stat = path.stat()
    return _load_feature_network(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_feature_network(path: Path, mtime_ns: int, size: int) -> FeatureNetwork:
    from controversial.zoo.checkpoints import read_checkpoint
    from controversial.zoo.registry import arch_spec

    info, state = read_checkpoint(path)
    if info.naturalness is None:
        raise UserError(
            f"{path} is a classifier's checkpoint without reference features, not a feature network; train one "
            "with train.py model=features/<name>"
        )
    net = arch_spec(info.arch).builder(**info.arch_kwargs)
    net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    net.eval().requires_grad_(False)
    return FeatureNetwork(
        net,
        info.dataset_info or dataset_info(info.dataset),
        info.naturalness["reference_features"].float(),
        float(info.naturalness["floor"]),
        float(info.naturalness["ceiling"]),
        path,
        int(info.naturalness.get("reference_seed", 0)),
    )


def naturalness(
    images: torch.Tensor, dataset: str | DatasetInfo, options: NaturalnessOptions | None = None
) -> Naturalness:
    """KID x 10^3 of ``images`` ((N, C, H, W) in [0, 1], scored as 8-bit images) against the dataset's reference
    test images, with its floor and ceiling. Raises ``NaturalnessUnavailable`` (saying why) when it cannot be
    measured: no feature network for the dataset, or fewer than 2 images."""
    info = dataset_info(dataset) if isinstance(dataset, str) else dataset
    network = load_feature_network(feature_network_file(info, options))
    if not same_dataset(network.dataset, info):
        raise UserError(f"{network.path} is the feature network of '{network.dataset.name}', not of '{info.name}'")
    if len(images) < 2:
        raise NaturalnessUnavailable(f"KID needs at least 2 images, got {len(images)}")
    if images.dim() != 4 or tuple(images.shape[1:]) != info.image_shape:
        raise UserError(f"naturalness: images of shape {tuple(images.shape)}, {info.name} has (N, *{info.image_shape})")
    mean, std = kid(network.features(images.detach().cpu()), network.reference)  # the network lives on the CPU
    return Naturalness(mean, std, network.floor, network.ceiling)


def classes_floor(dataset: str, classes: Sequence[int], n: int, root: str | os.PathLike | None = None) -> float:
    """KID x 10^3 of ``n`` real test images of ``classes`` only (in turn, outside the reference), read from the
    data root: the floor for a stimulus set of those classes. The reference holds every class, so a set of fewer
    classes (a benchmark on a few cells) scores above the stored floor whatever its images look like."""
    from controversial.data import load_dataset

    network = load_feature_network(feature_network_file(dataset_info(dataset)))
    images, labels = load_dataset(dataset, "test", root).tensors
    generator = torch.Generator().manual_seed(network.reference_seed)
    _, held_out = _reference_split(len(images), len(network.reference), generator)
    by_class = {c: held_out[labels[held_out] == c].tolist() for c in classes}
    if any(len(found) < n for found in by_class.values()):
        raise UserError(f"classes_floor: fewer than {n} test images outside the reference in one of {list(classes)}")
    picks = [by_class[classes[i % len(classes)]][i // len(classes)] for i in range(n)]
    return kid(network.features(images[picks]), network.reference)[0]


def stimulus_images(folder: Path, rows: Sequence[ManifestRow]) -> torch.Tensor:
    """The 8-bit PNGs of ``rows`` (paths relative to ``folder``, as a run's or an overview's manifest has them,
    checked there) as one (N, C, H, W) tensor in [0, 1]."""
    if not rows:
        return torch.empty(0)
    base = folder.resolve()
    return torch.stack([torch.from_numpy(load_png(os.path.normpath(base / row.image_file))) for row in rows])


def summarise(
    images: torch.Tensor, dataset: str | DatasetInfo, options: NaturalnessOptions | None = None
) -> tuple[str, dict[str, Any]]:
    """The naturalness of a stimulus set for a summary line (``KID 687 (real 0, noise 1469)``, or ``KID
    unavailable``) and for its record (``NATURALNESS_NAME``: the numbers and how they were measured, or why
    there are none)."""
    info = dataset_info(dataset) if isinstance(dataset, str) else dataset
    if options is not None and not options.measure:
        return "", {"available": False, "reason": "not measured (naturalness.measure=false)", "n_images": len(images)}
    try:
        measured = naturalness(images, info, options)
    except NaturalnessUnavailable as reason:
        return "KID unavailable", {"available": False, "reason": str(reason), "n_images": len(images)}
    path = feature_network_file(info, options).resolve()
    return measured.text(), {
        "available": True,
        "kid_x1000": measured.kid,
        "kid_std_x1000": measured.kid_std,
        "floor_x1000": measured.floor,
        "ceiling_x1000": measured.ceiling,
        "n_images": len(images),
        "subsets": SUBSETS,
        "subset_size": min(len(images), REFERENCE_IMAGES, MAX_SUBSET_SIZE),
        "feature_network": str(path),
        "feature_network_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
