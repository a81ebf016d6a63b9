"""The datasets the models are trained on, as plain data: names, image shapes and class names.

Kept apart from ``controversial.data`` (which loads the images with torch) so that commands that only
need the names, such as the study server, start without importing torch.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import Field

from controversial.errors import UserError
from controversial.options import Options


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    image_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    display_name: str
    mirror_symmetric: bool  # a left-right mirror image shows the same class (so test-time flips are valid)
    source: str = ""  # where the images come from for a dataset that is not built in ("folder:<path>", ...)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "image_shape": list(self.image_shape), "class_names": list(self.class_names)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DatasetInfo:
        shape, classes = tuple(values["image_shape"]), tuple(values["class_names"])
        return cls(**{**values, "image_shape": shape, "class_names": classes})


DATASETS: dict[str, DatasetInfo] = {
    "mnist": DatasetInfo("mnist", (1, 28, 28), tuple(str(d) for d in range(10)), "MNIST", mirror_symmetric=False),
    "cifar10": DatasetInfo(
        "cifar10",
        (3, 32, 32),
        ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
        "CIFAR10",
        mirror_symmetric=True,
    ),
}


BUILTIN_DATASETS = tuple(DATASETS)


def register_dataset(info: DatasetInfo) -> DatasetInfo:
    """Make a dataset that is not built in (an imported model's image folder) known by name in this process.

    Checkpoints and model files of imported models carry their ``DatasetInfo``; reading one registers it,
    so every stage that looks a dataset up by name (synthesis, export, analysis) follows its class list.
    Registering the same description again is a no-op; another description under a taken name is refused.
    """
    known = DATASETS.get(info.name)
    if known is not None and known != info:
        raise UserError(
            f"dataset '{info.name}' is already known with other classes or image size "
            f"({len(known.class_names)} classes {list(known.class_names)[:5]}..., shape {known.image_shape}); "
            f"this one has {len(info.class_names)} classes, shape {info.image_shape}: give it another name"
        )
    DATASETS[info.name] = info
    return info


def dataset_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise UserError(f"unknown dataset '{name}'; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def default_data_root() -> str:
    """``$CONTROVERSIAL_DATA_ROOT``, else ``data`` (relative to the working directory)."""
    return os.environ.get("CONTROVERSIAL_DATA_ROOT", "data")


class DataOptions(Options):
    """Where a command finds the datasets (MNIST/, cifar10/ below one root)."""

    root: str = Field(
        default_factory=default_data_root,
        description="data root with MNIST/ and cifar10/ (default: $CONTROVERSIAL_DATA_ROOT, else ./data)",
    )
    download: bool = Field(True, description="fall back to torchvision's download when the data root lacks a dataset")


class ModelDataOptions(Options):
    """The data root of commands that only load models (the KDE models read their training images)."""

    root: str = Field(
        default_factory=default_data_root, description="data root; the KDE models read their training images from here"
    )
