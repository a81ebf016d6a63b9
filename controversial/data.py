"""MNIST and CIFAR-10 from a configurable data root, with torchvision's download as the fallback, and the
image folders of ``controversial.datasets.describe_dataset`` (``folder:<path>``, ``imagenet16:<path>``).

The data root is, in order: the ``root`` argument (config key ``data.root``), the environment
variable ``CONTROVERSIAL_DATA_ROOT``, then ``./data``. Local copies are read in the layouts the
project ships (gzip or plain IDX files for MNIST, ``ImageFolder`` JPEGs for CIFAR-10) as well as
torchvision's own layouts, so nothing needs unpacking and a read-only data folder works.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from controversial.datasets import (
    DATASETS,
    DatasetInfo,
    FolderOptions,
    dataset_info,
    describe_dataset,
    locate,
    split_files,
)
from controversial.errors import UserError

log = logging.getLogger(__name__)

DATA_ROOT_ENV = "CONTROVERSIAL_DATA_ROOT"
CACHE_DIR_ENV = "CONTROVERSIAL_CACHE_DIR"  # where decoded image folders are cached; "off" disables the cache
SPLITS = ("train", "test")


class DatasetNotFoundError(UserError, FileNotFoundError):
    """Raised with the list of places searched and the ways to point the project at the data."""


def resolve_data_root(root: str | os.PathLike | None = None) -> Path:
    """The explicit root, else $CONTROVERSIAL_DATA_ROOT, else ./data."""
    if root not in (None, ""):
        return Path(root).expanduser()
    return Path(os.environ.get(DATA_ROOT_ENV) or "data").expanduser()


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (gzip or plain): big-endian dims after a 4-byte magic number."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        data = handle.read()
    n_dims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(n_dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * n_dims).reshape(dims)


def _find_idx(raw_dir: Path, stem: str) -> Path | None:
    for candidate in (raw_dir / f"{stem}.gz", raw_dir / stem):
        if candidate.is_file():
            return candidate
    return None


def _mnist_local(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    prefix = "train" if split == "train" else "t10k"
    raw_dir = root / "MNIST" / "raw"
    images = _find_idx(raw_dir, f"{prefix}-images-idx3-ubyte")
    labels = _find_idx(raw_dir, f"{prefix}-labels-idx1-ubyte")
    if images is None or labels is None:
        return None
    x = torch.from_numpy(_read_idx(images).copy()).unsqueeze(1)
    y = torch.from_numpy(_read_idx(labels).astype(np.int64))
    return x, y


def decoded_cache_dir() -> Path | None:
    """$CONTROVERSIAL_CACHE_DIR, else $XDG_CACHE_HOME/controversial, else ~/.cache/controversial; None if "off"."""
    configured = os.environ.get(CACHE_DIR_ENV, "")
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "controversial"


def _content_key(folder: Path, files: list[str]) -> str:
    """A digest of every file's path (relative to ``folder``) and bytes: any edit, addition or removal changes it."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.relpath(path, folder).encode() + b"\0")
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:24]


def _cifar_local(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """An ``ImageFolder`` of CIFAR-10 JPEGs, decoded once and cached as uint8 tensors keyed by the files' content.

    Decoding 50,000 JPEGs takes tens of seconds on a laptop CPU; hashing them takes about one.
    """
    folder = root / "cifar10" / split
    if not folder.is_dir():
        return None
    from torchvision.datasets import ImageFolder

    info = DATASETS["cifar10"]
    dataset = ImageFolder(folder)
    if tuple(dataset.classes) != info.class_names:
        raise UserError(f"{folder}: class folders {dataset.classes} differ from CIFAR-10's {list(info.class_names)}")

    def decode() -> tuple[torch.Tensor, torch.Tensor]:
        images = np.stack([np.asarray(dataset.loader(path).convert("RGB")) for path, _ in dataset.samples])
        x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
        return x, torch.tensor(dataset.targets, dtype=torch.int64)

    key = f"cifar10-{split}-{_content_key(folder, [p for p, _ in dataset.samples])}"
    return _cached(folder, key, decode)


def _cached(
    folder: Path, key: str, decode: Callable[[], tuple[torch.Tensor, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``decode()``'s images and labels, read from the decoded cache under ``key`` when there, else stored there."""
    from controversial.atomic import atomic_write_bytes

    cache_dir = decoded_cache_dir()
    cache = None if cache_dir is None else cache_dir / f"{key}.pt"
    if cache is not None and cache.is_file():
        cached = torch.load(cache, weights_only=True)
        log.info("decoded %s read from the cache %s", folder, cache)
        return cached["images"], cached["labels"]
    x, y = decode()
    if cache is not None:
        buffer = io.BytesIO()
        torch.save({"images": x, "labels": y}, buffer)
        try:
            atomic_write_bytes(cache, buffer.getvalue())
            log.info("decoded %s cached in %s (%s=off disables the cache)", folder, cache, CACHE_DIR_ENV)
        except OSError as error:  # a read-only home must not stop a run: the cache only saves time
            log.warning("could not cache decoded %s in %s: %s", folder, cache, error)
    return x, y


def _decode_image(path: Path, channels: int, size: int) -> np.ndarray:
    """(H, W, C) uint8: grey or RGB, centre-cropped to a square and resized to ``size`` (bicubic), the stated rule."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            converted = image.convert("L" if channels == 1 else "RGB")
    except (UnidentifiedImageError, OSError) as error:
        raise UserError(f"{path} cannot be decoded as an image ({error}); remove it from the class folder") from None
    if converted.size != (size, size):
        converted = ImageOps.fit(converted, (size, size), method=Image.Resampling.BICUBIC)
    return np.asarray(converted).reshape(size, size, channels)


def _image_folder(info: DatasetInfo, split: str, root: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """A folder dataset's split, decoded once and cached, keyed by its files' content and the decoding rule.

    Read from a folder of its images that exists here (``datasets.locate``: a moved folder too); the cache key
    holds the files' paths relative to it, so a moved folder reuses the decoded cache."""
    info = locate(info, root)
    files = split_files(info, split)  # from the located folder: no second look for it
    channels, size, _ = info.image_shape
    folder = info.location
    assert folder is not None  # located: an image folder
    split_rule = "own" if info.test_fraction == 0 else f"f{info.test_fraction:g}-s{info.split_seed}"
    rule = f"c{channels}-{size}px-{split_rule}-v1"  # v1: centre crop + bicubic resize; bump if decoding changes

    def decode() -> tuple[torch.Tensor, torch.Tensor]:
        images = np.stack([_decode_image(path, channels, size) for path, _ in files])
        x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
        return x, torch.tensor([label for _, label in files], dtype=torch.int64)

    key = f"{info.name}-{split}-{rule}-{_content_key(folder, [str(path) for path, _ in files])}"
    images, labels = _cached(folder, key, decode)
    log.info("loaded %s/%s from %s (%d images)", info.name, split, folder, len(labels))
    return images, labels


def _torchvision_download(name: str, root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    from torchvision import datasets

    train = split == "train"
    if name == "mnist":
        ds = datasets.MNIST(root, train=train, download=True)
        return ds.data.unsqueeze(1).clone(), ds.targets.clone()
    ds = datasets.CIFAR10(root, train=train, download=True)
    return torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds.targets)


def _torchvision_cached(name: str, root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A copy that torchvision downloaded earlier (``cifar-10-batches-py``)."""
    if name != "cifar10" or not (root / "cifar-10-batches-py").is_dir():
        return None
    from torchvision import datasets

    ds = datasets.CIFAR10(root, train=split == "train", download=False)
    return torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds.targets)


def load_uint8(
    name: str, split: str, root: str | os.PathLike | None = None, download: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images as uint8 (N,C,H,W) and labels as int64 (N,), from the data root or a download.

    A registered image folder (``describe_dataset``) is read from its own path, or where it moved
    (``datasets.locate``: another location met, else ``<root>/<folder name>``); ``download`` concerns the
    built-ins only.
    """
    info = dataset_info(name)
    if split not in SPLITS:
        raise UserError(f"unknown split '{split}'; known: {', '.join(SPLITS)}")
    data_root = resolve_data_root(root)
    if info.source:
        return _image_folder(info, split, data_root)
    local_reader = _mnist_local if name == "mnist" else _cifar_local
    for reader in (local_reader, lambda r, s: _torchvision_cached(name, r, s)):
        found = reader(data_root, split)
        if found is not None:
            log.info("loaded %s/%s from %s (%d images)", name, split, data_root, len(found[1]))
            return found
    tried = (
        [data_root / "MNIST" / "raw"]
        if name == "mnist"
        else [data_root / "cifar10" / split, data_root / "cifar-10-batches-py"]
    )
    download_error = "download disabled (data.download=false)"
    if download and not data_root.is_dir():  # never create folders the user did not make: a typo'd root stays a typo
        download_error = f"no download into {data_root}, which does not exist (create it to allow one)"
    elif download:
        try:
            return _torchvision_download(name, data_root, split)
        except Exception as error:  # network errors come in many types; report whichever it was
            download_error = f"torchvision download failed: {type(error).__name__}: {error}"
    raise DatasetNotFoundError(
        f"{DATASETS[name].display_name} ({split}) not found. Looked in: "
        + ", ".join(str(p) for p in tried)
        + f"; {download_error}. Point the project at a copy with data.root=/path/to/data or "
        f"the environment variable {DATA_ROOT_ENV}=/path/to/data (expected layout: "
        "<root>/MNIST/raw/*-idx?-ubyte[.gz] and <root>/cifar10/{train,test}/<class>/*.jpg)."
    )


def load_images(
    dataset: str,
    split: str = "train",
    root: str | os.PathLike | None = None,
    *,
    folder: FolderOptions | None = None,
    download: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact images and labels the commands use, for training a model of your own on them: uint8 (N,C,H,W)
    and int64 (N,) for ``dataset`` = ``mnist``, ``cifar10``, ``folder:<path>`` or ``imagenet16:<path>``.

    The data root is ``root``, else $CONTROVERSIAL_DATA_ROOT, else ./data (MNIST's ``.gz`` IDX files and the
    CIFAR-10 JPEG folders are read as they are; torchvision's own layouts too). A folder is read with ``folder``
    (image size, channels, split), as ``import_model.py dataset=folder:<path> folder.*=`` reads it, so a model
    trained on these tensors sees at import the images it was trained on. ``download``: torchvision's download
    of a built-in when the root lacks it (off by default: nothing is fetched unasked).
    """
    info = describe_dataset(dataset, folder)
    return load_uint8(info.name, split, root, download)


def load_dataset(
    dataset: str,
    split: str = "train",
    root: str | os.PathLike | None = None,
    *,
    folder: FolderOptions | None = None,
    download: bool = False,
) -> TensorDataset:
    """``load_images`` as a ``TensorDataset`` of (float image in [0, 1] with shape (C,H,W), int label): the tensors
    ``train.py`` trains on and ``import_model.py`` calibrates and tests on (a model's normalisation is its own)."""
    images, labels = load_images(dataset, split, root, folder=folder, download=download)
    return TensorDataset(images.float().div_(255.0), labels)
