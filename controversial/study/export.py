"""Sweep -> study bundle: select stimuli, render display images, assign opaque ids, write a version.

Opaque ids are random tokens, so neither the browser nor a participant reading the page source can
tell a controversial stimulus from a natural image or which models it targets; only the private
``key.csv`` maps ids back to conditions. Attention checks are images too (the instruction drawn in
pixels), so the API shows every trial the same way.

The consent and instruction texts are frozen into the bundle; an export refuses the repository's
placeholder texts unless it is declared a pilot (``pilot=true``, recorded in ``study.json``). One blank is
filled here instead: ``[duration]``, with the study's estimated length (``duration.py``).
"""

from __future__ import annotations

import io
import logging
import re
import secrets
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
from PIL import Image
from pydantic import Field, model_validator

from controversial.datasets import DATASETS, dataset_info, register_dataset
from controversial.errors import UserError
from controversial.options import Options, Seed
from controversial.records.names import natural_filename
from controversial.records.runs import RunClasses
from controversial.records.study import KeyEntry, TrialSpec
from controversial.study.attention import check_room
from controversial.study.bundle import BundleError, StudySpec, check_categories, write_bundle
from controversial.study.display import DisplayOptions, attention_png, display_png, png_to_uint8
from controversial.study.duration import BLANK, DurationEstimate, DurationOptions, estimate_duration, fill_duration
from controversial.study.selection import (
    SelectionError,
    SweepStimulus,
    collect_sweep,
    select_controversial,
    select_natural,
    select_repeats,
    sweep_classes,
)

log = logging.getLogger(__name__)

DEFAULT_WEB_SOURCE = Path(__file__).resolve().parents[2] / "human_study" / "src"
TEXT_FILES = ("text/consent.html", "text/instructions.html")
# The repository's template texts carry these: an editing note and [bracketed] blanks such as [contact]; the
# [duration] blank is no placeholder: the export fills it with its estimate.
PLACEHOLDER = re.compile(r"Edit this file|\[[A-Za-z][A-Za-z ,/_-]{0,40}\]")

# (dataset name) -> (uint8 images (N,C,H,W), int labels (N,)) of the test split
NaturalLoader = Callable[[str], tuple[np.ndarray, np.ndarray]]
Source = Literal["synthetic", "natural"]  # a manifest row's ``source``
DEFAULT_SOURCES: tuple[Source, ...] = ("synthetic",)


class BundleOptions(Options):
    """What every study bundle is made with, whichever command chooses its stimuli, and where it goes."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="study name: letters, digits, '_', '.', '-'")
    studies_dir: str = Field("studies", description="bundles go to <studies_dir>/<name>/v<k>/")
    sources: list[Source] = Field(
        default_factory=lambda: list(DEFAULT_SOURCES), min_length=1, description="manifest sources to select from"
    )
    n_demo: int = Field(2, ge=0, description="practice trials (natural test images, not recorded)")
    seed: Seed = 0
    display: DisplayOptions = Field(default_factory=DisplayOptions)
    title: str = Field("Rate what you see in images", description="the study's title")
    attention_prompt: str = Field(
        StudySpec.attention_prompt, description="attention-check text; {category} is replaced"
    )
    web_source: str | None = Field(None, description="the experiment's HTML/JS/CSS; null: human_study/src")
    pilot: bool = Field(False, description="allow the placeholder consent/instruction texts; never for Prolific")
    duration: DurationOptions = Field(default_factory=DurationOptions)


class TrialCounts(Options):
    """How many trials of each kind a participant sees (defaults: the paper's, METHODS.md section 2)."""

    per_pair: int = Field(
        20, ge=2, description="controversial stimuli per model pair (a multiple of the class count, 10 for MNIST)"
    )
    natural_per_class: int = Field(10, ge=0, description="natural test images per class")
    n_repeats: int = Field(42, ge=0, description="stimuli shown a second time (test-retest reliability)")
    n_attention: int = Field(4, ge=0, description="instructional attention checks")


class ExportOptions(BundleOptions, TrialCounts):
    """Everything that decides a study bundle's content."""

    @model_validator(mode="after")
    def _prompt_names_the_category(self) -> ExportOptions:
        if self.n_attention and "{category}" not in self.attention_prompt:
            raise UserError("attention_prompt must contain {category}, the category participants are told to pick")
        return self


def placeholder_texts(web_source: str | Path) -> list[str]:
    """``file: "snippet"`` for every placeholder left in the consent and instruction texts."""
    found = []
    for name in TEXT_FILES:
        path = Path(web_source) / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            found += [f"{name}: {m.group(0)!r}" for m in PLACEHOLDER.finditer(text) if m.group(0) != BLANK]
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


def recorded_classes(sweep_dir: str | Path, stimuli: Sequence[SweepStimulus]) -> RunClasses:
    """The classes the sweep's runs recorded; a dataset they describe that is not known here (an imported model's
    image folder) is registered from that record, so its test images load by name."""
    classes = sweep_classes(sweep_dir, stimuli)
    if classes.described is not None and classes.dataset not in DATASETS:
        register_dataset(classes.described)
    return classes


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
    settings: ExportOptions,
    natural_loader: NaturalLoader,
    web_source: str | Path,
    provenance: dict[str, Any] | None = None,
) -> Path:
    """Build and write a new study bundle version from a synthesis sweep; returns its folder."""
    check_web_texts(web_source, settings.pilot)
    rng = np.random.default_rng(settings.seed)
    stimuli = collect_sweep(sweep_dir)
    if not any(s.row.accepted for s in stimuli):
        raise SelectionError(f"no accepted stimuli under {sweep_dir}")
    classes = recorded_classes(sweep_dir, stimuli)
    chosen = select_controversial(stimuli, settings.per_pair, classes.synthesized, settings.sources)
    test_set = natural_loader(classes.dataset)
    natural = select_natural(test_set[1], settings.natural_per_class, classes.synthesized, rng)
    return write_selection(
        sweep_dir,
        studies_dir,
        settings,
        classes.dataset,
        chosen,
        natural,
        test_set,
        web_source,
        rng,
        provenance,
        classes.class_names,
        classes.synthesized,
    )


def write_selection(
    sweep_dir: str | Path,
    studies_dir: str | Path,
    settings: ExportOptions,
    dataset: str,
    chosen: Sequence[SweepStimulus],
    natural: Sequence[int],
    test_set: tuple[np.ndarray, np.ndarray],
    web_source: str | Path,
    rng: np.random.Generator,
    provenance: dict[str, Any] | None = None,
    categories: Sequence[str] | None = None,
    classes: Sequence[int] | None = None,
) -> Path:
    """Render and write a bundle for an already chosen set (the paper's selection or a design): controversial
    stimuli, natural test-set indices; ``rng`` draws the practice images, repeats and attention checks.
    ``categories``: the class names participants rate (default: the registered dataset's), recorded in the bundle;
    ``classes``: the class indices practice images are drawn from (default: all)."""
    placeholders = check_web_texts(web_source, settings.pilot)
    if placeholders:
        log.warning("pilot export with placeholder text (%s): do not publish it on Prolific", "; ".join(placeholders))
    categories = tuple(dataset_info(dataset).class_names if categories is None else categories)
    check_categories(categories, f"dataset {dataset}")  # before any rendering: what the server cannot accept
    _check_class_names(chosen, categories)
    invert = settings.display.invert_mnist and dataset == "mnist"
    test_images, test_labels = test_set

    def render(image: np.ndarray) -> bytes:
        return display_png(image, settings.display.size, settings.display.resample, invert)

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

    demo_classes = range(len(categories)) if classes is None else classes
    demo_pool = select_natural(test_labels, 1, demo_classes, rng, exclude=natural)
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
            settings.display.size,
            colour=np.asarray(test_images).shape[1] == 3,  # (N, C, H, W): attention checks match the stimuli
        )  # kept in the bundle as a record; participants see one drawn for them (``attention.py``)

    colour = np.asarray(test_images).shape[1] == 3
    prompts = [settings.attention_prompt.format(category=categories[int(cls)]) for cls in instructed]
    room = check_room(prompts, settings.display.size, colour, int(rng.integers(2**62)))  # the server's renderings

    trials = [TrialSpec(sid, "stimulus", 0) for sid in rated]
    trials += [TrialSpec(sid, "stimulus", 1) for sid in repeats]
    trials += [TrialSpec(e.stimulus_id, "attention", 0) for e in key if e.kind == "attention"]
    trials += [TrialSpec(e.stimulus_id, "demo", 0) for e in key if e.kind == "demo"]
    estimate = study_duration(
        settings.duration, len(trials), web_source, calibrated=settings.display.degrees is not None
    )
    spec = StudySpec(
        name=settings.name,
        dataset=dataset,
        categories=tuple(categories),
        title=settings.title,
        display_size=settings.display.size,
        attention_prompt=settings.attention_prompt,
        pilot=settings.pilot,
        stimuli_invert=False,  # originals are the native stimuli, as synthesised and as the test set stores them
        display_inverted=invert,
        display_degrees=settings.display.degrees,
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        provenance={
            "sweep_dir": str(Path(sweep_dir).resolve()),
            **(provenance or {}),
            "counts": {
                "controversial": len(chosen),
                "natural": len(natural),
                "repeats": len(repeats),
                "attention": settings.n_attention,
                "demo": len(demos),
            },
            "duration": {
                "minutes": estimate.minutes,
                "seconds_per_trial": estimate.seconds_per_trial,
                "source": estimate.source,
            },
        },
    )
    with tempfile.TemporaryDirectory() as scratch:
        return write_bundle(
            studies_dir, spec, trials, key, images, originals, filled_web_source(web_source, estimate, scratch), room
        )


def study_duration(
    options: DurationOptions, trials: int, web_source: str | Path, calibrated: bool = False
) -> DurationEstimate:
    """The estimate for ``trials`` trials (practice included), the web source's texts and, for a study sized in
    degrees, the screen calibration; logged, with a one-paragraph warning when longer than ``options.max_minutes``."""
    texts = [(Path(web_source) / n).read_text(encoding="utf-8") for n in TEXT_FILES if (Path(web_source) / n).is_file()]
    estimate = estimate_duration(options, trials, texts, calibrated)
    log.info("%s", estimate.summary())
    if not any(BLANK in text for text in texts):
        log.info("the consent text has no %s blank: check that it states about %d minutes", BLANK, estimate.minutes)
    for warning in (estimate.doubt, estimate.warning(options.max_minutes)):
        if warning:
            log.warning("%s", warning)
    return estimate


def filled_web_source(web_source: str | Path, estimate: DurationEstimate, scratch: str | Path) -> Path:
    """A copy of ``web_source`` under ``scratch`` whose texts have ``[duration]`` filled in."""
    filled = Path(scratch) / "web"
    shutil.copytree(web_source, filled)
    for name in TEXT_FILES:
        if (filled / name).is_file():
            text = (filled / name).read_text(encoding="utf-8")
            (filled / name).write_text(fill_duration(text, estimate), encoding="utf-8")
    return filled
