import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from controversial.data import DATA_ROOT_ENV, DatasetNotFoundError, load_dataset, load_uint8, resolve_data_root


def _write_idx(path, array: np.ndarray, compress: bool) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(f"{path}.gz", "wb") as handle:
            handle.write(payload)
    else:
        path.write_bytes(payload)


@pytest.mark.parametrize("compress", [True, False])
def test_reads_gzip_and_plain_idx_files(tmp_path, compress):
    images = np.random.default_rng(0).integers(0, 256, size=(7, 28, 28))
    labels = np.array([5, 0, 4, 1, 9, 2, 1])
    raw = tmp_path / "MNIST" / "raw"
    _write_idx(raw / "t10k-images-idx3-ubyte", images, compress)
    _write_idx(raw / "t10k-labels-idx1-ubyte", labels, compress)
    x, y = load_uint8("mnist", "test", tmp_path, download=False)
    assert x.shape == (7, 1, 28, 28) and x.dtype == torch.uint8
    assert torch.equal(x[:, 0], torch.from_numpy(images.astype(np.uint8)))
    assert y.tolist() == labels.tolist()
    dataset = load_dataset("mnist", "test", tmp_path, download=False)
    assert dataset[0][0].max() <= 1.0 and dataset[0][1].item() == 5


def test_missing_dataset_names_the_paths_tried_and_the_fix(tmp_path):
    with pytest.raises(DatasetNotFoundError) as error:
        load_uint8("cifar10", "train", tmp_path / "nowhere", download=False)
    message = str(error.value)
    assert str(tmp_path / "nowhere" / "cifar10" / "train") in message
    assert DATA_ROOT_ENV in message and "data.root" in message


def test_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert resolve_data_root(None) == tmp_path
    assert resolve_data_root("/explicit") == Path("/explicit")
    monkeypatch.delenv(DATA_ROOT_ENV)
    assert str(resolve_data_root(None)) == "data"


def test_unknown_dataset_and_split_are_named():
    with pytest.raises(ValueError, match="known: mnist, cifar10"):
        load_uint8("svhn", "test")
    with pytest.raises(ValueError, match="known: train, test"):
        load_uint8("mnist", "validation")


@pytest.mark.data
def test_shared_mnist_and_cifar10_copies_load():
    x, y = load_uint8("mnist", "train")
    assert x.shape == (60000, 1, 28, 28) and y[0].item() == 5
    assert abs(x.float().mean().item() / 255 - 0.1307) < 1e-3
    x, y = load_uint8("cifar10", "test")
    assert x.shape == (10000, 3, 32, 32) and torch.bincount(y).tolist() == [1000] * 10


def test_missing_data_root_is_not_created_by_a_download_attempt(tmp_path):
    root = tmp_path / "nonexistent" / "data"
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        load_uint8("mnist", "test", root, download=True)
    assert not (tmp_path / "nonexistent").exists()


def test_the_public_loader_gives_the_tensors_the_commands_use(tmp_path, monkeypatch):
    """``controversial.load_images``/``load_dataset`` (issue 60, item 5): MNIST from the root's ``.gz`` files and a
    folder dataset read with its options, exactly as ``train.py`` and ``import_model.py`` read them."""
    from PIL import Image

    import controversial as cv
    from controversial.data import CACHE_DIR_ENV
    from controversial.datasets import DATASETS, FolderOptions

    images = np.random.default_rng(1).integers(0, 256, size=(5, 28, 28))
    _write_idx(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte", images, True)
    _write_idx(tmp_path / "MNIST" / "raw" / "train-labels-idx1-ubyte", np.arange(5), True)
    x, y = cv.load_images("mnist", "train", tmp_path)
    assert torch.equal(x, load_uint8("mnist", "train", tmp_path, download=False)[0]) and y.tolist() == [0, 1, 2, 3, 4]
    floats = cv.load_dataset("mnist", "train", tmp_path)
    assert torch.equal(floats.tensors[0], x.float() / 255) and floats.tensors[0].shape == (5, 1, 28, 28)

    monkeypatch.setenv(CACHE_DIR_ENV, "off")
    monkeypatch.setattr("controversial.datasets.DATASETS", dict(DATASETS))
    for k, shape in enumerate(("circle", "square")):
        for i in range(4):
            (tmp_path / "shapes" / shape).mkdir(parents=True, exist_ok=True)
            Image.new("L", (16, 16), 40 * k + i).save(tmp_path / "shapes" / shape / f"{i}.png")
    options = FolderOptions(image_size=8, channels=1, test_fraction=0.25)
    fx, fy = cv.load_images(f"folder:{tmp_path / 'shapes'}", "test", folder=options)
    assert fx.shape == (2, 1, 8, 8) and sorted(fy.tolist()) == [0, 1]
    same = cv.load_dataset(f"folder:{tmp_path / 'shapes'}", "test", folder=options)
    assert torch.equal(same.tensors[0], fx.float() / 255) and torch.equal(same.tensors[1], fy)
