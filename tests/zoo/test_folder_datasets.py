"""``folder:<path>`` and ``imagenet16:<path>`` datasets: described from the folder, loaded and cached by data.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from controversial.data import CACHE_DIR_ENV, load_uint8
from controversial.datasets import DATASETS, IMAGENET16_CLASSES, FolderOptions, describe_dataset, folder_files
from controversial.errors import UserError


@pytest.fixture(autouse=True)
def restore_datasets(monkeypatch, tmp_path):
    """Registrations stay inside the test; decoded images are cached under tmp_path."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    saved = dict(DATASETS)
    yield
    DATASETS.clear()
    DATASETS.update(saved)


def write_image(path: Path, value: int, size: tuple[int, int] = (8, 8), mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    colour = value if mode == "L" else (value, 255 - value, value // 2)
    Image.new(mode, size, colour).save(path)


def write_classes(root: Path, counts: dict[str, int], size=(8, 8), mode="RGB") -> Path:
    for k, (class_name, n) in enumerate(counts.items()):
        for i in range(n):
            write_image(root / class_name / f"{i:03d}.png", 10 * k + i, size, mode)
    return root


def test_class_folders_are_split_seeded_and_stratified(tmp_path):
    root = write_classes(tmp_path / "My Shapes", {"square": 10, "circle": 5, "triangle": 4})
    info = describe_dataset(f"folder:{root}", FolderOptions(test_fraction=0.2, split_seed=3))
    assert info.name == "my_shapes" and DATASETS["my_shapes"] is info
    assert info.class_names == ("circle", "square", "triangle")  # sorted subfolder names
    assert info.image_shape == (3, 8, 8) and info.source == f"folder:{root.resolve()}"
    test, train = folder_files(info, "test"), folder_files(info, "train")
    assert [label for _, label in test] == [0, 1, 1, 2]  # round(0.2 n), at least one per class
    assert sorted(test + train) == sorted((p, k) for k, c in enumerate(info.class_names) for p in (root / c).iterdir())
    assert folder_files(info, "test") == test  # the same seed, the same split
    other = describe_dataset(f"folder:{root}", FolderOptions(name="shapes_seed4", test_fraction=0.2, split_seed=4))
    assert folder_files(other, "test") != test


def test_train_and_test_subfolders_are_the_split(tmp_path):
    write_classes(tmp_path / "d" / "train", {"a": 3, "b": 2, "c": 2})
    write_classes(tmp_path / "d" / "test", {"a": 1, "b": 1, "c": 2})
    info = describe_dataset(f"folder:{tmp_path / 'd'}", FolderOptions(name="abc"))
    assert info.test_fraction == 0 and len(info.class_names) == 3
    x, y = load_uint8("abc", "test")
    assert x.shape == (4, 3, 8, 8) and x.dtype == torch.uint8 and y.tolist() == [0, 1, 2, 2]
    assert load_uint8("abc", "train")[1].tolist() == [0, 0, 0, 1, 1, 2, 2]


def test_images_are_centre_cropped_resized_and_cached(tmp_path, monkeypatch):
    root = tmp_path / "grey"
    for class_name, value in (("dark", 20), ("light", 230)):
        for i in range(3):
            image = np.full((20, 60), value, dtype=np.uint8)
            image[:, :10] = image[:, 50:] = 0  # outside the centre square (and the filter's reach): cropped away
            path = root / class_name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(path)
    info = describe_dataset(f"folder:{root}", FolderOptions(image_size=10, test_fraction=0.34))
    assert info.image_shape == (1, 10, 10)  # every image grey: one channel
    x, y = load_uint8(info.name, "train")
    assert x.shape == (4, 1, 10, 10) and x[y == 0].unique().tolist() == [20] and x[y == 1].unique().tolist() == [230]
    cached = list((tmp_path / "cache").glob("grey-train-c1-10px-f0.34-s0-v1-*.pt"))
    assert len(cached) == 1
    monkeypatch.setattr("controversial.data._decode_image", lambda *a: pytest.fail("decoded again"))
    assert torch.equal(load_uint8(info.name, "train")[0], x)


def test_size_channels_and_the_cache_key_follow_the_options(tmp_path):
    root = write_classes(tmp_path / "pics", {"x": 3, "y": 3}, size=(12, 12))
    rgb = describe_dataset(f"folder:{root}")
    assert rgb.image_shape == (3, 12, 12)  # the images' shared size and colour
    grey = describe_dataset(f"folder:{root}", FolderOptions(name="pics_grey", channels=1, image_size=8))
    assert load_uint8("pics_grey", "test")[0].shape[1:] == (1, 8, 8)
    assert load_uint8("pics", "test")[0].shape[1:] == (3, 12, 12)
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2  # two rules, two cache entries
    assert grey.image_shape == (1, 8, 8)


def test_imagenet16_folder_is_224_px_rgb_on_the_16_categories(tmp_path):
    root = write_classes(tmp_path / "mvh", {c: 2 for c in IMAGENET16_CLASSES}, size=(30, 30), mode="L")
    info = describe_dataset(f"imagenet16:{root}")
    assert info.name == "imagenet16" and info.class_names == IMAGENET16_CLASSES
    assert info.image_shape == (3, 224, 224) and info.mirror_symmetric
    x, y = load_uint8("imagenet16", "test")
    assert x.shape == (16, 3, 224, 224) and y.tolist() == list(range(16))


def test_imagenet16_folder_needs_exactly_the_16_categories(tmp_path):
    root = write_classes(tmp_path / "mvh", {c: 2 for c in IMAGENET16_CLASSES[1:]} | {"zebra": 2})
    with pytest.raises(UserError, match=r"missing: \['airplane'\], not a category: \['zebra'\]"):
        describe_dataset(f"imagenet16:{root}")


def test_builtins_pass_through_and_a_clashing_name_is_refused(tmp_path):
    assert describe_dataset("mnist", FolderOptions()) is DATASETS["mnist"]
    root = write_classes(tmp_path / "CIFAR10", {"a": 2, "b": 2})
    with pytest.raises(UserError, match="'cifar10', the name of a built-in dataset; give it another name"):
        describe_dataset(f"folder:{root}")
    assert describe_dataset(f"folder:{root}", FolderOptions(name="my_cifar")).name == "my_cifar"
    with pytest.raises(UserError, match="neither a built-in"):
        describe_dataset("svhn")


def test_one_name_for_two_different_folders_is_refused(tmp_path):
    describe_dataset(f"folder:{write_classes(tmp_path / 'one' / 'pets', {'cat': 2, 'dog': 2})}")
    with pytest.raises(UserError, match=r"already known .*class_names \['cat', 'dog'\] vs \['cat', 'dog', 'owl'\]"):
        describe_dataset(f"folder:{write_classes(tmp_path / 'two' / 'pets', {'cat': 2, 'dog': 2, 'owl': 2})}")
    # the same classes read at another size: the error names the one field that differs, and how to rename
    with pytest.raises(UserError, match=re.escape("(image_shape [3, 8, 8] vs [3, 16, 16]; ")):
        describe_dataset(f"folder:{tmp_path / 'one' / 'pets'}", FolderOptions(image_size=16))


def _empty_class(root: Path) -> None:
    write_classes(root, {"a": 2})
    (root / "b").mkdir()


def _not_an_image(root: Path) -> None:
    write_classes(root, {"a": 2, "b": 2})
    (root / "b" / "notes.txt").write_text("not an image")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: None, "is not a folder"),
        (lambda root: write_classes(root, {"only": 3}), r"has 1 class subfolder\(s\) \['only'\]; .*at least 2"),
        (_empty_class, "class 'b' of .* is empty: no images in"),
        (lambda root: write_classes(root, {"a": 2, "b": 1}), "class 'b' has fewer than 2 images"),
        (_not_an_image, r"1 file\(s\) .* are not images PIL can read, e.g. .*notes.txt"),
        (lambda root: write_classes(root, {"a": 2, "b": 2}, size=(8, 6)), "image_size=<side>"),
    ],
    ids=["missing folder", "one class", "empty class", "one image", "not an image", "not square"],
)
def test_folder_errors_name_the_problem(tmp_path, make, message):
    root = tmp_path / "data"
    make(root)
    with pytest.raises(UserError, match=message):
        describe_dataset(f"folder:{root}")


def test_train_and_test_with_different_classes_are_refused(tmp_path):
    write_classes(tmp_path / "d" / "train", {"a": 2, "b": 2, "c": 2})
    write_classes(tmp_path / "d" / "test", {"a": 2, "b": 2, "d": 2})
    with pytest.raises(UserError, match=r"only in train/: \['c'\]; only in test/: \['d'\]"):
        describe_dataset(f"folder:{tmp_path / 'd'}")


def test_hidden_files_and_top_level_files_are_ignored(tmp_path):
    root = write_classes(tmp_path / "d", {"a": 2, "b": 2})
    (root / "README.txt").write_text("about")
    (root / "a" / ".DS_Store").write_bytes(b"\0")
    (root / ".git").mkdir()
    info = describe_dataset(f"folder:{root}")
    assert info.class_names == ("a", "b") and len(folder_files(info, "train") + folder_files(info, "test")) == 4


def test_a_folder_that_moved_away_is_named_when_loading(tmp_path):
    root = write_classes(tmp_path / "gone", {"a": 2, "b": 2})
    describe_dataset(f"folder:{root}")
    root.rename(tmp_path / "elsewhere")
    with pytest.raises(
        UserError, match=re.escape(f"'gone': its image folder is not on this machine; looked in {root}")
    ):
        load_uint8("gone", "test")


def test_describing_a_folder_needs_no_torch(tmp_path):
    """The study server and the option groups read dataset descriptions; they start without torch."""
    root = write_classes(tmp_path / "d", {"a": 2, "b": 2})
    code = (
        "import sys\nfor name in ('torch', 'torchvision', 'timm'):\n    sys.modules[name] = None\n"
        "from controversial.analysis.benchmark.decision_options import DecisionsOptions\n"
        "from controversial.datasets import describe_dataset\n"
        f"print(describe_dataset('folder:{root}').class_names, DecisionsOptions(readout='imagenet16').readout)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('a', 'b') imagenet16"


@pytest.mark.data
def test_the_cifar10_folder_as_a_folder_dataset_equals_the_builtin():
    """The project's CIFAR-10 JPEG folder read as folder:<path>: the same images, labels and order as the built-in."""
    from controversial.data import resolve_data_root

    root = resolve_data_root(None) / "cifar10"
    info = describe_dataset(f"folder:{root}", FolderOptions(name="cifar10_folder"))
    assert info.class_names == DATASETS["cifar10"].class_names and info.image_shape == (3, 32, 32)
    x, y = load_uint8("cifar10_folder", "test")
    builtin_x, builtin_y = load_uint8("cifar10", "test")
    assert torch.equal(y, builtin_y) and torch.equal(x, builtin_x)
