"""The on-disk study bundle: ``studies/<name>/v<k>/`` written once, read by the server and exports.

Layout (``docs/human_study.md`` has the details)::

    study.json     settings: dataset, categories, rating levels, display size, provenance
    trials.csv     what every participant sees: opaque stimulus_id, kind, image_repetition
    key.csv        PRIVATE: stimulus_id -> original image name and condition (never served)
    images/<id>.png  display images, named by opaque id only
    stimuli/<name>.png  PRIVATE: the rated stimuli at native resolution under their original names,
                   so ``evaluate.py images=<bundle>/stimuli`` scores models on exactly these images
    web/           the experiment's own HTML/JS/CSS (jsPsych itself comes from npm)

A version is assembled in a hidden temporary folder and renamed into place, so readers never see
half a bundle, and an existing non-empty version is never replaced (rename refuses with ENOTEMPTY).
Display images are written in a random order, re-encoded to one byte layout (chunks and their lengths) and
given one modification time, so nothing about a file (size, structure, time, inode order) says which condition
it belongs to.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from controversial.atomic import atomic_write_bytes, atomic_write_text, fsync_tree
from controversial.errors import UserError
from controversial.records.study import KeyEntry, TrialSpec, key_text, read_key, read_trial_list, trial_list_text
from controversial.study.display import uniform_pngs
from controversial.study.schemas import MAX_CATEGORIES, MAX_NAME_LENGTH
from controversial.untrusted import inside, safe_component

log = logging.getLogger(__name__)

BUNDLE_FORMAT = 2  # 2: attention checks are images, display images padded
STUDY_FILE = "study.json"
TRIALS_FILE = "trials.csv"
KEY_FILE = "key.csv"
IMAGES_DIR = "images"
STIMULI_DIR = "stimuli"
WEB_DIR = "web"
RATING_LEVELS: tuple[int, ...] = (0, 25, 50, 75, 100)
KINDS = ("controversial", "natural", "attention", "demo")
TRIAL_KINDS = ("stimulus", "attention", "demo")
_VERSION = re.compile(r"^v(\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class BundleError(UserError):
    """A study bundle that is missing, malformed or inconsistent; the message names the file."""


@dataclass(frozen=True)
class StudySpec:
    """Study-wide settings and provenance, stored as ``study.json``."""

    name: str
    dataset: str
    categories: tuple[str, ...]
    title: str = "Rate what you see in images"
    display_size: int = 224
    rating_levels: tuple[int, ...] = RATING_LEVELS
    attention_prompt: str = (
        "Attention check: to show that you are reading, please select 100% for "
        '"{category}" and 0% for every other category.'
    )
    created_utc: str = ""
    provenance: dict = field(default_factory=dict)
    format: int = BUNDLE_FORMAT
    pilot: bool = False  # exported with placeholder consent/instruction text: not for real participants
    # How the images are stored and shown, so no reader has to guess (None: a bundle written before this was
    # recorded). stimuli/ holds the rated images as the models see them; images/ holds what participants saw.
    stimuli_invert: bool | None = None  # must stimuli/ be inverted (1 - x) before a model sees it?
    display_inverted: bool | None = None  # are the display images inverted (MNIST dark on light)?
    display_degrees: float | None = None  # stimuli sized in degrees of visual angle (calibration.py); None: pixels


@dataclass(frozen=True)
class StudyBundle:
    """A loaded, validated bundle version."""

    root: Path
    version: int
    spec: StudySpec
    trials: tuple[TrialSpec, ...]
    key: Mapping[str, KeyEntry]

    @property
    def label(self) -> str:
        """``<name>/v<k>``, the identity participants and responses are filed under."""
        return f"{self.spec.name}/v{self.version}"

    @property
    def batch(self) -> int:
        """Which batch of an adaptive study this version is (``design_study.py`` records it; 1 otherwise)."""
        return int(self.spec.provenance.get("design", {}).get("batch", 1))

    def image_path(self, stimulus_id: str) -> Path:
        return self.root / IMAGES_DIR / f"{stimulus_id}.png"


def recorded_inversion(folder: str | Path) -> bool | None:
    """Whether a bundle's ``stimuli/`` folder must be inverted for the models, as its ``study.json`` records;
    None when ``folder`` is not a bundle's stimuli folder or the bundle predates the record."""
    study_path = Path(folder).resolve().parent / STUDY_FILE
    if Path(folder).resolve().name != STIMULI_DIR or not study_path.is_file():
        return None
    value = json.loads(study_path.read_text(encoding="utf-8")).get("stimuli_invert")
    return None if value is None else bool(value)


def existing_versions(study_root: Path) -> list[int]:
    """Version numbers present under ``studies/<name>/``."""
    if not study_root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in study_root.iterdir() if p.is_dir() and (m := _VERSION.match(p.name)))


def validate_name(name: str) -> str:
    if not _NAME.match(name):
        raise BundleError(
            f"study name {name!r}: use 1-64 letters, digits, '_', '.', '-' (starting with a letter or digit)"
        )
    return name


def write_bundle(
    studies_dir: str | Path,
    spec: StudySpec,
    trials: Sequence[TrialSpec],
    key: Sequence[KeyEntry],
    images: Mapping[str, bytes],
    originals: Mapping[str, bytes],
    web_source: str | Path,
    idat_room: int = 0,
) -> Path:
    """Write a new version ``<studies_dir>/<name>/v<k>`` (k = latest + 1) and return its path.

    ``images`` are display PNGs by stimulus id; ``originals`` the native stimuli by original name; ``idat_room``
    the IDAT length the display images are padded to at least (room for the checks the server draws).
    """
    validate_name(spec.name)
    _check_consistent(spec, trials, {entry.stimulus_id: entry for entry in key}, set(images), Path("<new bundle>"))
    rated = {entry.image for entry in key if entry.kind in ("controversial", "natural")}
    if set(originals) != rated:
        raise BundleError(
            f"original stimuli must be exactly the rated images; differing: {sorted(set(originals) ^ rated)[:5]}"
        )
    web_source = Path(web_source)
    if not (web_source / "index.html").is_file():
        raise BundleError(f"web experiment sources not found at {web_source} (expected index.html there)")
    study_root = Path(studies_dir) / spec.name
    study_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=study_root))
    try:
        atomic_write_text(staging / STUDY_FILE, json.dumps(asdict(spec), indent=2, sort_keys=True) + "\n")
        atomic_write_text(staging / TRIALS_FILE, trial_list_text(trials))
        atomic_write_text(staging / KEY_FILE, key_text(key))
        _write_display_images(staging / IMAGES_DIR, images, idat_room)
        for name, data in originals.items():
            atomic_write_bytes(
                inside(staging / STIMULI_DIR, safe_component(name, "original stimulus name"), name), data
            )
        shutil.copytree(web_source, staging / WEB_DIR)
        os.chmod(staging, 0o755)
        fsync_tree(staging)  # on disk before it is renamed into place, so even a power cut leaves no partial v<k>
        while True:
            version = max(existing_versions(study_root), default=0) + 1
            target = study_root / f"v{version}"
            if target.is_dir():  # another export claimed this version since the listing; take the next one
                continue
            if target.exists():
                raise BundleError(f"{target} exists but is not a bundle folder; move it away")
            try:
                os.rename(staging, target)
            except OSError:  # another export claimed this version first; take the next one
                if target.is_dir() and any(target.iterdir()):
                    continue
                raise
            break
        fsync_tree(study_root, recursive=False)  # the rename itself
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("wrote study bundle %s (%d trials, %d images)", target, len(trials), len(images))
    return target


def _write_display_images(folder: Path, images: Mapping[str, bytes], idat_room: int) -> None:
    """Random write order, one byte layout (chunks and lengths), one modification time: no file metadata and no
    PNG structure follows the key."""
    uniform = uniform_pngs(images, idat_room)
    ids = list(uniform)
    random.SystemRandom().shuffle(ids)
    for stimulus_id in ids:
        atomic_write_bytes(folder / f"{stimulus_id}.png", uniform[stimulus_id])
    stamp = int(time.time())
    for stimulus_id in ids:
        os.utime(folder / f"{stimulus_id}.png", (stamp, stamp))


def check_categories(categories: Sequence[str], where: str | Path) -> None:
    """Categories the server can accept answers for: distinct, 1 to ``MAX_CATEGORIES`` names of 1 to
    ``MAX_NAME_LENGTH`` characters (the answer schema's limits; past them every answer would be a 422)."""
    if len(categories) != len(set(categories)) or not categories:
        raise BundleError(f"{where}: categories must be distinct and non-empty, got {list(categories)[:10]}")
    if len(categories) > MAX_CATEGORIES:
        raise BundleError(
            f"{where}: {len(categories)} categories; a study can have at most {MAX_CATEGORIES} (the most ratings "
            "an answer may carry): rate a subset of the classes"
        )
    long = [c for c in categories if not 1 <= len(c) <= MAX_NAME_LENGTH]
    if long:
        raise BundleError(
            f"{where}: category name {long[0][:80]!r} has {len(long[0])} characters; allowed: 1 to {MAX_NAME_LENGTH} "
            f"(the answer schema's limit; {len(long)} name(s) too long): shorten the class names"
        )


def _check_consistent(
    spec: StudySpec, trials: Sequence[TrialSpec], key: Mapping[str, KeyEntry], images: set[str], where: Path
) -> None:
    check_categories(spec.categories, where)
    for entry in key.values():
        for column, name in (("stimulus_id", entry.stimulus_id), ("image", entry.image)):
            try:
                if name or column == "stimulus_id":  # both become file names (images/<id>.png, stimuli/<image>)
                    safe_component(name, f"{where}: key {column}")
            except UserError as error:
                raise BundleError(str(error)) from None
        if entry.kind not in KINDS:
            raise BundleError(
                f"{where}: key kind {entry.kind!r} for {entry.stimulus_id!r} unknown; allowed: {', '.join(KINDS)}"
            )
    seen: set[tuple[str, int]] = set()
    for trial in trials:
        if trial.kind not in TRIAL_KINDS:
            raise BundleError(f"{where}: trial kind {trial.kind!r} unknown; allowed: {', '.join(TRIAL_KINDS)}")
        if trial.stimulus_id not in key:
            raise BundleError(f"{where}: trial stimulus_id {trial.stimulus_id!r} is not in the key")
        if (trial.stimulus_id, trial.image_repetition) in seen:
            raise BundleError(
                f"{where}: stimulus {trial.stimulus_id!r} repetition {trial.image_repetition} listed twice"
            )
        seen.add((trial.stimulus_id, trial.image_repetition))
        if trial.stimulus_id not in images:
            raise BundleError(f"{where}: no display image for stimulus {trial.stimulus_id!r}")
    names = [entry.image for entry in key.values() if entry.image]
    if len(names) != len(set(names)):
        raise BundleError(f"{where}: two stimuli share an original image name; names must be unique")


def _check_complete(root: Path, key: Mapping[str, KeyEntry], images: set[str]) -> None:
    """Every file the key implies is there: a display image per stimulus, a native image per rated one, and the
    web experiment, so a bundle copied in part (an interrupted transfer from a colleague) is refused, not served."""
    missing = [f"{IMAGES_DIR}/{sid}.png" for sid in key if sid not in images]
    rated = [e.image for e in key.values() if e.kind in ("controversial", "natural")]
    missing += [f"{STIMULI_DIR}/{name}" for name in rated if not (root / STIMULI_DIR / name).is_file()]
    missing += [f"{WEB_DIR}/index.html"] if not (root / WEB_DIR / "index.html").is_file() else []
    if missing:
        raise BundleError(
            f"{root}: incomplete bundle, {len(missing)} file(s) missing ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}); copy the whole folder again, or export a new version"
        )


def _present(path: Path) -> Path:
    if not path.is_file():
        raise BundleError(f"{path}: missing; is this a study bundle (studies/<name>/v<k>)?")
    return path


def load_bundle(path: str | Path) -> StudyBundle:
    """Read and cross-check a bundle version; errors name the file that is wrong."""
    root = Path(path).resolve()
    match = _VERSION.match(root.name)
    if not match:
        raise BundleError(f"{root}: a study bundle folder is named v<k> (e.g. studies/mnist_pilot/v1)")
    study_path = root / STUDY_FILE
    if not study_path.is_file():
        raise BundleError(f"{study_path}: missing; is this a study bundle (studies/<name>/v<k>)?")
    raw = json.loads(study_path.read_text(encoding="utf-8"))
    if raw.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{study_path}: bundle format {raw.get('format')!r}, this code reads format {BUNDLE_FORMAT}")
    raw["categories"] = tuple(raw["categories"])
    raw["rating_levels"] = tuple(raw["rating_levels"])
    spec = StudySpec(**raw)
    key = read_key(_present(root / KEY_FILE), BundleError)
    trials = read_trial_list(_present(root / TRIALS_FILE), BundleError)
    images = {p.stem for p in (root / IMAGES_DIR).glob("*.png")}
    _check_consistent(spec, trials, key, images, root)
    _check_complete(root, key, images)
    return StudyBundle(root=root, version=int(match.group(1)), spec=spec, trials=trials, key=key)
