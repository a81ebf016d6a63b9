"""Sweep -> study bundle: select stimuli, render display images, assign opaque ids, write a version.

Opaque ids are random tokens, so neither the browser nor a participant reading the page source can
tell a controversial stimulus from a natural image or which models it targets; only the private
``key.csv`` maps ids back to conditions. Attention checks are images too (the instruction drawn in
pixels), so the API shows every trial the same way.

The consent and instruction texts are frozen into the bundle; an export refuses the repository's
placeholder texts unless it is declared a pilot (``pilot=true``, recorded in ``study.json``).
"""

from __future__ import annotations

import io
import logging
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from controversial.datasets import dataset_info
from controversial.records.names import natural_filename
from controversial.records.study import KeyEntry, TrialSpec
from controversial.study.bundle import BundleError, StudySpec, write_bundle
from controversial.study.display import attention_png, display_png, png_to_uint8
from controversial.study.selection import (
    SelectionError,
    SweepStimulus,
    collect_sweep,
    select_controversial,
    select_natural,
    select_repeats,
)

log = logging.getLogger(__name__)

DEFAULT_WEB_SOURCE = Path(__file__).resolve().parents[2] / "human_study" / "src"
TEXT_FILES = ("text/consent.html", "text/instructions.html")
# The repository's template texts carry these: an editing note and [bracketed] blanks such as [duration].
PLACEHOLDER = re.compile(r"Edit this file|\[[A-Za-z][A-Za-z ,/_-]{0,40}\]")

# (dataset name) -> (uint8 images (N,C,H,W), int labels (N,)) of the test split
NaturalLoader = Callable[[str], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ExportSettings:
    """Everything that decides a study's content; defaults follow the paper (METHODS.md section 2)."""

    name: str
    per_pair: int = 20
    natural_per_class: int = 10
    n_repeats: int = 42
    n_attention: int = 4
    n_demo: int = 2
    display_size: int = 224
    resample: str = "bicubic"
    invert_mnist: bool = True
    seed: int = 0
    sources: tuple[str, ...] = ("synthetic",)
    title: str = "Rate what you see in images"
    attention_prompt: str = StudySpec.attention_prompt
    pilot: bool = False  # allow placeholder consent/instruction text (marked in study.json; not for participants)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("natural_per_class", "n_repeats", "n_attention", "n_demo"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)}: must be 0 or more")
        if self.display_size <= 0:
            raise ValueError(f"display.size={self.display_size}: must be a positive number of pixels")
        if self.n_attention and "{category}" not in self.attention_prompt:
            raise ValueError("attention_prompt must contain {category}, the category participants are told to pick")


def placeholder_texts(web_source: str | Path) -> list[str]:
    """``file: "snippet"`` for every placeholder left in the consent and instruction texts."""
    found = []
    for name in TEXT_FILES:
        path = Path(web_source) / name
        if path.is_file():
            found += [f"{name}: {m.group(0)!r}" for m in PLACEHOLDER.finditer(path.read_text(encoding="utf-8"))]
    return found


def _new_id(taken: set[str]) -> str:
    while True:
        token = secrets.token_hex(6)
        if token not in taken:
            taken.add(token)
            return token


def _hwc(image: np.ndarray) -> np.ndarray:
    """(C,H,W) uint8 -> (H,W) for grey, (H,W,3) for colour."""
    image = np.asarray(image, dtype=np.uint8)
    return image[0] if image.shape[0] == 1 else np.transpose(image, (1, 2, 0))


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _check_class_names(stimuli: Sequence[SweepStimulus], categories: Sequence[str]) -> None:
    for stim in stimuli:
        for index, name in ((stim.row.class_a, stim.row.class_a_name), (stim.row.class_b, stim.row.class_b_name)):
            if not 0 <= index < len(categories) or categories[index] != name:
                raise SelectionError(
                    f"{stim.image_path.name}: class {index} is named {name!r} in its manifest, "
                    f"but the dataset's categories are {list(categories)}"
                )


def check_web_texts(web_source: str | Path, pilot: bool) -> list[str]:
    """The placeholder texts left in ``web_source``; an error unless the export is a pilot."""
    placeholders = placeholder_texts(web_source)
    if placeholders and not pilot:
        raise BundleError(
            f"placeholder text in {web_source}: {'; '.join(placeholders[:5])}. Put your approved "
            "consent text (ethics reference, contact, duration, pay) in human_study/src/text/, or "
            "export with pilot=true for a pilot that no real participant sees"
        )
    return placeholders


def export_study(
    sweep_dir: str | Path,
    studies_dir: str | Path,
    settings: ExportSettings,
    natural_loader: NaturalLoader,
    web_source: str | Path,
) -> Path:
    """Build and write a new study bundle version from a synthesis sweep; returns its folder."""
    check_web_texts(web_source, settings.pilot)
    rng = np.random.default_rng(settings.seed)
    stimuli = collect_sweep(sweep_dir)
    dataset = next((s.row.dataset for s in stimuli if s.row.accepted), None)
    if dataset is None:
        raise SelectionError(f"no accepted stimuli under {sweep_dir}")
    categories = dataset_info(dataset).class_names
    chosen = select_controversial(stimuli, settings.per_pair, len(categories), settings.sources)
    test_set = natural_loader(dataset)
    natural = select_natural(test_set[1], settings.natural_per_class, len(categories), rng)
    return write_selection(sweep_dir, studies_dir, settings, dataset, chosen, natural, test_set, web_source, rng)


def write_selection(
    sweep_dir: str | Path,
    studies_dir: str | Path,
    settings: ExportSettings,
    dataset: str,
    chosen: Sequence[SweepStimulus],
    natural: Sequence[int],
    test_set: tuple[np.ndarray, np.ndarray],
    web_source: str | Path,
    rng: np.random.Generator,
) -> Path:
    """Render and write a bundle for an already chosen set (the paper's selection or a design): controversial
    stimuli, natural test-set indices; ``rng`` draws the practice images, repeats and attention checks."""
    placeholders = check_web_texts(web_source, settings.pilot)
    if placeholders:
        log.warning("pilot export with placeholder text (%s): do not publish it on Prolific", "; ".join(placeholders))
    info = dataset_info(dataset)
    categories = info.class_names
    _check_class_names(chosen, categories)
    invert = settings.invert_mnist and dataset == "mnist"
    test_images, test_labels = test_set

    def render(image: np.ndarray) -> bytes:
        return display_png(image, settings.display_size, settings.resample, invert)

    taken: set[str] = set()
    key: list[KeyEntry] = []
    images: dict[str, bytes] = {}
    originals: dict[str, bytes] = {}
    for stim in chosen:
        stimulus_id = _new_id(taken)
        row = stim.row
        key.append(
            KeyEntry(
                stimulus_id=stimulus_id,
                kind="controversial",
                image=stim.image_path.name,
                model_a=row.model_a,
                model_b=row.model_b,
                class_a=str(row.class_a),
                class_b=str(row.class_b),
                class_a_name=row.class_a_name,
                class_b_name=row.class_b_name,
                hard_score=repr(row.hard_score),
                origin=str(stim.image_path),
            )
        )
        originals[stim.image_path.name] = stim.image_path.read_bytes()
        images[stimulus_id] = render(png_to_uint8(originals[stim.image_path.name]))

    demo_pool = select_natural(test_labels, 1, len(categories), rng, exclude=natural)
    demos = [int(i) for i in rng.choice(demo_pool, size=min(settings.n_demo, len(demo_pool)), replace=False)]
    for kind, indices in (("natural", natural), ("demo", demos)):
        for index in indices:
            stimulus_id = _new_id(taken)
            true_class = categories[int(test_labels[index])]
            name = natural_filename(dataset, index, true_class)
            key.append(
                KeyEntry(
                    stimulus_id=stimulus_id,
                    kind=kind,
                    image=name,
                    true_class=true_class,
                    origin=f"{dataset} test #{index}",
                )
            )
            images[stimulus_id] = render(_hwc(test_images[index]))
            if kind == "natural":
                originals[name] = _png(_hwc(test_images[index]))

    rated = [entry.stimulus_id for entry in key if entry.kind in ("controversial", "natural")]
    repeats = select_repeats(rated, settings.n_repeats, rng)
    instructed = rng.choice(len(categories), size=settings.n_attention, replace=settings.n_attention > len(categories))
    for cls in instructed:
        stimulus_id = _new_id(taken)
        key.append(KeyEntry(stimulus_id=stimulus_id, kind="attention", instructed_class=categories[int(cls)]))
        images[stimulus_id] = attention_png(
            settings.attention_prompt.format(category=categories[int(cls)]),
            settings.display_size,
            colour=info.image_shape[0] == 3,
        )

    trials = [TrialSpec(sid, "stimulus", 0) for sid in rated]
    trials += [TrialSpec(sid, "stimulus", 1) for sid in repeats]
    trials += [TrialSpec(e.stimulus_id, "attention", 0) for e in key if e.kind == "attention"]
    trials += [TrialSpec(e.stimulus_id, "demo", 0) for e in key if e.kind == "demo"]
    spec = StudySpec(
        name=settings.name,
        dataset=dataset,
        categories=tuple(categories),
        title=settings.title,
        display_size=settings.display_size,
        attention_prompt=settings.attention_prompt,
        pilot=settings.pilot,
        stimuli_invert=False,  # originals are the native stimuli, as synthesised and as the test set stores them
        display_inverted=invert,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        provenance={
            "sweep_dir": str(Path(sweep_dir).resolve()),
            **settings.provenance,
            "counts": {
                "controversial": len(chosen),
                "natural": len(natural),
                "repeats": len(repeats),
                "attention": settings.n_attention,
                "demo": len(demos),
            },
        },
    )
    return write_bundle(studies_dir, spec, trials, key, images, originals, web_source)
