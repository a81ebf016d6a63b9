"""The datasets the models are trained on, as plain data: names, image shapes and class names.

Kept apart from ``controversial.data`` (which loads the images with torch) so that commands that only
need the names, such as the study server, start without importing torch.

Besides the built-ins (MNIST, CIFAR-10), ``describe_dataset`` describes a labelled image folder
(``folder:<path>``) or the 16 entry-level ImageNet categories of the model-vs-human benchmark
(``imagenet16:<path>``) from the folder's structure and image headers; ``controversial.data`` decodes them.
Such a description records where the images were found, but that location is not part of the dataset's
identity (``same_dataset``): a folder moved to another place or machine is the same dataset, read from where
it is now (``register_dataset``, ``locate``).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from controversial.errors import UserError
from controversial.options import Options
from controversial.untrusted import safe_component


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    image_shape: tuple[int, int, int]
    class_names: tuple[str, ...]
    display_name: str
    mirror_symmetric: bool  # a left-right mirror image shows the same class (so test-time flips are valid)
    source: str = ""  # where the images come from for a dataset that is not built in ("folder:<path>", ...)
    test_fraction: float = 0.0  # of each class held out as the test split; 0: the folder's own train/ and test/
    split_seed: int = 0  # seeds the held-out draw when test_fraction > 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "image_shape": list(self.image_shape), "class_names": list(self.class_names)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DatasetInfo:
        """A description as a file (checkpoint, model file, run settings) records it; its names become parts of
        file names (stimuli, models/<dataset>/), so each must be a plain file-name component."""
        shape, classes = tuple(values["image_shape"]), tuple(values["class_names"])
        for what, name in (("name", values.get("name")), ("display_name", values.get("display_name"))):
            safe_component(name, f"dataset description, {what}")
        for name in classes:
            safe_component(name, f"dataset {values.get('name')!r}, class name")
        return cls(**{**values, "image_shape": shape, "class_names": classes})

    @property
    def kind(self) -> str:
        """``folder`` or ``imagenet16`` for an image folder; empty for a built-in."""
        return self.source.partition(":")[0]

    @property
    def location(self) -> Path | None:
        """Where this description found the images (an image folder's path); None for a built-in."""
        return Path(self.source.partition(":")[2]) if self.source else None

    def at(self, location: Path) -> DatasetInfo:
        """The same dataset read from another folder (a copy or a move of the images)."""
        return replace(self, source=f"{self.kind}:{location}")

    def identity(self) -> dict[str, Any]:
        """What makes two descriptions the same dataset: every field except the folder's location, which only
        says where the images were found (a folder moved to another machine is still the same dataset)."""
        values = self.to_dict()
        del values["source"]
        return {**values, "kind": self.kind}


def same_dataset(a: DatasetInfo, b: DatasetInfo) -> bool:
    """Two descriptions of one dataset, perhaps found at different locations."""
    return a.identity() == b.identity()


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


@dataclass
class _Locations:
    """Every location met for one registered dataset, and whether the user chose the registered one."""

    registered: DatasetInfo  # the entry of DATASETS these belong to (a test or a caller may replace it)
    met: list[Path]
    given: bool


_LOCATIONS: dict[str, _Locations] = {}


def register_dataset(info: DatasetInfo, *, given: bool = False) -> DatasetInfo:
    """Make a dataset that is not built in (an imported model's image folder) known by name in this process.

    Checkpoints and model files of imported models carry their ``DatasetInfo``, and so do run records; reading
    one registers it, so every stage that looks a dataset up by name (synthesis, export, analysis) follows its
    class list. A description that agrees in everything but the folder's location (``same_dataset``) is the same
    dataset found elsewhere: a model imported on a laptop and used on a cluster. The registry then keeps one
    location: the one the user gave in this process (``given``: ``dataset=folder:<path>``), else one that
    exists on this machine, else the first met; ``locate`` tries the others. Another description under a taken
    name is refused. Returns the registered description (perhaps at another location than ``info``).
    """
    known = DATASETS.get(info.name)
    if known is not None and not same_dataset(known, info):
        raise UserError(
            f"dataset '{info.name}' is already known with another description ({differences(known, info)}; the "
            "known one first, as an imported model's file or checkpoint describes it): give this one another name "
            "(folder.name=<name>), or describe the same folder the same way"
        )
    locations = _LOCATIONS.get(info.name)
    if known is None or locations is None or locations.registered is not known:  # new, or replaced from outside
        locations = _LOCATIONS[info.name] = _Locations(known or info, [], False)
        if known is not None and known.location is not None:
            locations.met.append(known.location)
    if info.location is not None and info.location not in locations.met:
        locations.met.append(info.location)
    keep = info
    if known is not None and not given and (locations.given or _exists(known) or not _exists(info)):
        keep = known  # the user's location, else one that exists here, else the first met
    locations.registered, locations.given = keep, locations.given or given
    DATASETS[info.name] = keep
    return keep


def _exists(info: DatasetInfo) -> bool:
    return info.location is not None and info.location.is_dir()


def locate(info: DatasetInfo, root: str | os.PathLike | None = None) -> DatasetInfo:
    """``info`` at a folder of its images that exists on this machine (registered there), for reading them.

    Tried in order: the registered location (see ``register_dataset``), ``info``'s, every other location met in
    this process (checkpoints, model files, run records), then ``<root>/<folder name>`` for each of them, so a
    folder moved into the data root is found. A folder found elsewhere must hold the described classes in the
    described layout. None existing is an error naming every path tried.
    """
    if info.kind not in DATASET_KINDS:
        raise UserError(f"dataset {info.name!r} is not an image folder (source {info.source!r})")
    known = DATASETS.get(info.name)
    locations = _LOCATIONS.get(info.name)
    met = locations.met if locations is not None and known is not None and locations.registered is known else []
    first = [known.location] if known is not None and same_dataset(known, info) and known.location else []
    recorded = [path for path in dict.fromkeys([*first, info.location, *met]) if path is not None]
    names = dict.fromkeys([*(path.name for path in recorded), info.name])
    fallbacks = [Path(root).expanduser() / name for name in names] if root else []
    tried = list(dict.fromkeys(recorded + fallbacks))
    for folder in tried:
        if folder.is_dir():
            found = info if folder == info.location else info.at(folder)
            _check_same_classes(found, folder)
            register_dataset(found)  # found here: what dataset_info() says from now on, unless the user gave another
            return found
    raise UserError(
        f"dataset {info.name!r}: its image folder is not on this machine; looked in {', '.join(map(str, tried))} "
        "(the locations recorded by the checkpoints, model files and runs read so far"
        + (", then the data root" if fallbacks else "")
        + "). If the images moved, point at them: import_model.py dataset="
        f"{info.kind}:<where they are now> with the same folder.* options, or put (or link) the folder into the "
        "data root (data.root=... or $CONTROVERSIAL_DATA_ROOT) under its own name"
    )


def _check_same_classes(info: DatasetInfo, folder: Path) -> None:
    """A folder read for ``info`` holds its classes in its layout: else it is another dataset (or was edited)."""
    split = _split_layout(folder)
    classes = _subfolders(folder / "train") if split else _subfolders(folder)
    if split and _subfolders(folder / "test") != classes:
        classes = ()
    if split != (info.test_fraction == 0) or classes != info.class_names:
        layout = "train/ and test/ subfolders" if info.test_fraction == 0 else "class subfolders"
        held = "train/ and test/ subfolders" if split else "class subfolders"
        raise UserError(
            f"dataset {info.name!r}: {folder} is not the folder it describes: it holds {held} of "
            f"{_shown(list(classes))}, but the description (an imported model's file or checkpoint, or a run "
            f"record) has {layout} of {_shown(list(info.class_names))}; point at the folder the model was imported "
            "on, or import the model onto this one under another name (folder.name=<name>)"
        )


def differences(known: DatasetInfo, other: DatasetInfo) -> str:
    """``field known vs other`` for each field in which two datasets differ (not their location), for an error."""
    known_values, values = known.identity(), other.identity()
    return "; ".join(
        f"{field} {_shown(known_values[field])} vs {_shown(values[field])}"
        for field in values
        if values[field] != known_values[field]
    )


def _shown(value: Any) -> str:
    """A field of a description, shortened for a one-paragraph error (class lists can be long)."""
    if isinstance(value, list) and len(value) > 5:
        return f"{value[:5]}... ({len(value)} in all)"
    return repr(value) if isinstance(value, str) else str(value)


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
        description="data root with MNIST/ and cifar10/, and where an imported model's image folder that is not at "
        "its recorded path is looked for, under its own name (default: $CONTROVERSIAL_DATA_ROOT, else ./data)",
    )
    download: bool = Field(True, description="fall back to torchvision's download when the data root lacks a dataset")


class ModelDataOptions(Options):
    """The data root of commands that only load models (the KDE models read their training images)."""

    root: str = Field(
        default_factory=default_data_root, description="data root; the KDE models read their training images from here"
    )


IMAGENET16_FILE = Path(__file__).parent / "zoo" / "imagenet16_categories.tsv"
IMAGENET16_SIZE = 224  # the input resolution of the ImageNet models the 16 categories are read out of
GRAYSCALE_MODES = ("1", "L", "LA", "I", "I;16", "F")
DATASET_KINDS = ("folder", "imagenet16")


def imagenet16_categories() -> dict[str, tuple[str, ...]]:
    """The benchmark's 16 entry-level categories (in its order) -> their fine ImageNet classes' WordNet IDs."""
    categories = {}
    for line in IMAGENET16_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            category, wnids = line.split("\t")
            categories[category] = tuple(wnids.split())
    return categories


IMAGENET16_CLASSES = tuple(imagenet16_categories())


class FolderOptions(Options):
    """How an image folder (``dataset=folder:<path>`` or ``imagenet16:<path>``) becomes a dataset."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="the dataset's name (models/<name>/); default: the folder's base name, sanitised "
        "(imagenet16: 'imagenet16')",
    )
    image_size: int | None = Field(
        None,
        ge=8,
        description="side of the square images the models see; each image is centre-cropped to a square and "
        "resized (bicubic); default: imagenet16 224, a folder the size its images share (they must be square)",
    )
    channels: Literal[1, 3] | None = Field(
        None, description="1 (grey) or 3 (RGB); default: imagenet16 3, a folder 1 if all its images are grey, else 3"
    )
    test_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="share of each class held out as the test split (seeded, stratified) when the folder has "
        "no train/ and test/ subfolders",
    )
    split_seed: int = Field(0, ge=0, description="seed of the held-out draw")
    mirror_symmetric: bool | None = Field(
        None,
        description="a mirror image shows the same class (allows test-time flips); default: imagenet16 true, "
        "a folder false",
    )


def describe_dataset(spec: str, options: FolderOptions | None = None) -> DatasetInfo:
    """The dataset ``spec`` names (``mnist``, ``cifar10``, ``folder:<path>``, ``imagenet16:<path>``), registered.

    A folder holds one subfolder per class (its name is the class name; classes sorted), either under
    ``train/`` and ``test/`` (the layout is used when both exist) or directly, then split per class by
    ``test_fraction`` with ``split_seed``. Hidden files and files at the top level are ignored; every other
    file in a class folder must be an image (read here from its header only, so describing is fast).
    A built-in is returned as it is: the folder options do not apply to it.
    """
    options = options or FolderOptions()
    if spec in BUILTIN_DATASETS:
        return DATASETS[spec]
    kind, _, path = spec.partition(":")
    if kind not in DATASET_KINDS or not path:
        raise UserError(
            f"dataset {spec!r} is neither a built-in ({', '.join(BUILTIN_DATASETS)}) nor an image folder given "
            "as folder:<path> (class subfolders) or imagenet16:<path> (the 16 model-vs-human categories)"
        )
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise UserError(f"dataset {spec!r}: {folder} is not a folder (expected one subfolder of images per class)")
    split = _split_layout(folder)
    class_names = _class_names(folder, split, spec)
    if kind == "imagenet16":
        _check_imagenet16_classes(folder, class_names)
    headers = _image_headers(folder, split, class_names)
    name = options.name or ("imagenet16" if kind == "imagenet16" else _sanitised(folder.name))
    if name in BUILTIN_DATASETS:
        raise UserError(
            f"dataset {spec!r} would be named {name!r}, the name of a built-in dataset; give it another name "
            "(the folder options' name=...)"
        )
    size = options.image_size or (IMAGENET16_SIZE if kind == "imagenet16" else _common_size(folder, headers))
    grey = all(mode in GRAYSCALE_MODES for _, mode in headers.values())
    channels = options.channels or (3 if kind == "imagenet16" or not grey else 1)
    mirror = options.mirror_symmetric if options.mirror_symmetric is not None else kind == "imagenet16"
    info = DatasetInfo(
        name,
        (channels, size, size),
        class_names,
        display_name=name,
        mirror_symmetric=mirror,
        source=f"{kind}:{folder}",
        test_fraction=0.0 if split else options.test_fraction,
        split_seed=0 if split else options.split_seed,
    )
    for split_name in ("train", "test"):  # every class needs an image in each split
        split_files(info, split_name)
    return register_dataset(info, given=True)


def folder_files(info: DatasetInfo, split: str, root: str | os.PathLike | None = None) -> list[tuple[Path, int]]:
    """The (image file, class index) pairs of one split of a folder dataset, in a fixed order, read from a folder
    of its images that exists here (``locate``; ``root``: the data root, where a moved folder may be)."""
    return split_files(locate(info, root), split)


def split_files(info: DatasetInfo, split: str) -> list[tuple[Path, int]]:
    """:func:`folder_files` read from ``info``'s own location, as it is (a description just made, or ``locate``d).

    Classes layout: each class's sorted files are shuffled by ``random.Random("<split_seed>:<class>")`` and
    the first ``round(test_fraction * n)`` (at least 1, at most n - 1) are the test split."""
    folder = info.location
    assert folder is not None  # an image folder's description
    files: list[tuple[Path, int]] = []
    for index, class_name in enumerate(info.class_names):
        if info.test_fraction == 0:
            class_files = _class_files(folder / split / class_name)
        else:
            class_files = _class_files(folder / class_name)
            random.Random(f"{info.split_seed}:{class_name}").shuffle(class_files)
            n_test = min(len(class_files) - 1, max(1, round(info.test_fraction * len(class_files))))
            class_files = sorted(class_files[:n_test] if split == "test" else class_files[n_test:])
        if not class_files:
            where = folder / split / class_name if info.test_fraction == 0 else folder / class_name
            need = "no images" if info.test_fraction == 0 else "fewer than 2 images (one for each split)"
            raise UserError(f"dataset {info.name!r}: class {class_name!r} has {need} in {where}")
        files.extend((file, index) for file in class_files)
    return files


def _sanitised(name: str) -> str:
    cleaned = re.sub(r"[^a-z0-9_.-]+", "_", name.lower()).strip("_.-")
    return cleaned or "images"


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _split_layout(folder: Path) -> bool:
    return (folder / "train").is_dir() and (folder / "test").is_dir()


def _subfolders(folder: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in folder.iterdir() if p.is_dir() and _visible(p.name)))


def _class_names(folder: Path, split: bool, spec: str) -> tuple[str, ...]:
    if split:
        train, test = _subfolders(folder / "train"), _subfolders(folder / "test")
        if train != test:
            only_train, only_test = sorted(set(train) - set(test)) or "none", sorted(set(test) - set(train)) or "none"
            raise UserError(
                f"dataset {spec!r}: train/ and test/ hold different classes (only in train/: {only_train}; "
                f"only in test/: {only_test}); give both splits the same class subfolders"
            )
        classes = train
    else:
        classes = _subfolders(folder)
    if len(classes) < 2:
        where = f"{folder}/train and test" if split else str(folder)
        raise UserError(
            f"dataset {spec!r}: {where} has {len(classes)} class subfolder(s) {list(classes)}; a classifier needs "
            "at least 2 classes, one subfolder of images each (<path>/<class>/ or <path>/train/<class>/ and "
            "<path>/test/<class>/)"
        )
    return classes


def _check_imagenet16_classes(folder: Path, classes: tuple[str, ...]) -> None:
    if classes != IMAGENET16_CLASSES:
        raise UserError(
            f"imagenet16:{folder} must hold exactly the 16 category subfolders of the model-vs-human benchmark "
            f"({', '.join(IMAGENET16_CLASSES)}); missing: {sorted(set(IMAGENET16_CLASSES) - set(classes)) or 'none'}, "
            f"not a category: {sorted(set(classes) - set(IMAGENET16_CLASSES)) or 'none'}"
        )


def _class_files(class_folder: Path) -> list[Path]:
    """Every visible file below a class folder (subfolders included), sorted."""
    if not class_folder.is_dir():
        return []
    return sorted(
        p
        for p in class_folder.rglob("*")
        if p.is_file() and all(_visible(q) for q in p.relative_to(class_folder).parts)
    )


def _image_headers(folder: Path, split: bool, classes: tuple[str, ...]) -> dict[Path, tuple[tuple[int, int], str]]:
    """(width, height) and PIL mode of every image, read from the headers; refuses empty classes and non-images."""
    from PIL import Image, UnidentifiedImageError

    headers = {}
    not_images = []
    for class_name in classes:
        for class_folder in [folder / s / class_name for s in ("train", "test")] if split else [folder / class_name]:
            files = _class_files(class_folder)
            if not files:
                raise UserError(f"class {class_name!r} of {folder} is empty: no images in {class_folder}")
            for file in files:
                try:
                    with Image.open(file) as image:
                        headers[file] = (image.size, image.mode)
                except (UnidentifiedImageError, OSError):
                    not_images.append(file)
    if not_images:
        raise UserError(
            f"{len(not_images)} file(s) in the class folders of {folder} are not images PIL can read, e.g. "
            f"{not_images[0]}; remove them or move them out of the class folders (hidden files are ignored)"
        )
    return headers


def _common_size(folder: Path, headers: dict[Path, tuple[tuple[int, int], str]]) -> int:
    sizes = {size for size, _ in headers.values()}
    if len(sizes) == 1:
        ((width, height),) = sizes
        if width == height:
            return width
    example = next(file for file, (size, _) in headers.items() if size[0] != size[1] or len(sizes) > 1)
    width, height = headers[example][0]
    raise UserError(
        f"the images of {folder} do not all share one square size ({len(sizes)} size(s) among them; e.g. {example} "
        f"is {width}x{height}); state the size the models see with image_size=<side> "
        "(each image is centre-cropped to a square and resized to it)"
    )
