"""Stimulus file names: built and parsed by the same code, for this project's scheme and the PNAS 2020 release's.

Scheme ``project`` (what this project writes):
  - synthetic ``<model_a>_<class_a>_vs_<model_b>_<class_b>_seed<k>.png`` (``synthesize.py``);
  - natural controversial ``<model_a>_<class_a>_vs_<model_b>_<class_b>_natural<test index>.png`` (``rank_natural.py``);
  - natural test image ``MNIST_<index>_<class>.png`` / ``CIFAR10_<index>_<class>.png`` (study export, simulation).
Scheme ``pnas2020`` (the release, both experiments; see ``docs/analysis.md``):
  - Exp. 1 ``<handle_1>_<digit_1>_<handle_2>_<digit_2>.png`` (no separator word; handles contain underscores);
  - Exp. 2 ``<handle_1>_<class_1>_vs_<handle_2>_<class_2>.png``;
  - natural ``MNIST_<index>_<class>.png`` and ``CIFAR_10_test_<index>_<CIFAR-10 test index>_<class>.png``;
  - any of them with ``_repeated`` before ``.png``: a repeated presentation of the same image.
Model names may contain underscores, so classes must be categories of a known dataset (a built-in or a
registered one: ``datasets.register_dataset``; natural images are then ``<display name>_<index>_<class>.png``) and
PNAS handles must be known handles; anything else is an error naming the file and the accepted patterns, never a
guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Literal

from controversial.datasets import DATASETS
from controversial.errors import UserError
from controversial.untrusted import safe_component

Scheme = Literal["project", "pnas2020"]
SCHEMES: tuple[str, ...] = ("project", "pnas2020")
REPEATED_SUFFIX = "_repeated"

# The paper's model handles -> this project's model names, per dataset (data/pnas2020/README.md).
PNAS_MODELS: dict[str, dict[str, str]] = {
    "mnist": {
        "small_VGG": "vgg",
        "small_VGG_negative": "vgg_neg",
        "Wen_Global_PCN_E4": "pcn",
        "Sarasra_Capsule": "capsnet",
        "madry_adv_trained": "madry_linf",
        "madry_l2": "madry_l2",
        "Sarasra_Normalized_Reconstruction": "capsnet_recon",
        "Saarasra_Normalized_Reconstruction": "capsnet_recon",  # the release's documentation spells it so
        "Gaussian_KDE": "kde",
        "schott_VAE": "abs",
    },
    "cifar10": {
        "finetuned_vgg16_bn": "vgg16",
        "JEM-dscrmntv": "wrn",
        "Wen_PCN_A6": "pcn_cifar10",
        "robustness_resnet50_linf_8": "robust_linf",
        "robustness_resnet50_l2_1.0": "robust_l2",
        "Gaussian_KDE": "kde_cifar10",
        "JEM-20": "jem",
    },
}
PNAS_DATASET_LABELS = {"mnist": "MNIST", "cifar10": "CIFAR_10_test"}


class StimulusNameError(UserError):
    """A stimulus file name that no accepted pattern reads; the message names the file and the patterns."""


@dataclass(frozen=True)
class StimulusName:
    """What a stimulus file name says. Indices are kept as written (``"007"``) so names round-trip exactly."""

    scheme: Scheme
    dataset: str  # "mnist" or "cifar10"
    kind: Literal["synthetic", "natural_controversial", "natural"]
    model_a: str = ""
    class_a: str = ""
    model_b: str = ""
    class_b: str = ""
    seed: int | None = None  # synthetic stimuli of this project
    index: str = ""  # natural: index in the experiment / study; natural_controversial: test-set index
    test_index: str = ""  # PNAS CIFAR-10 natural images: the original CIFAR-10 test index
    true_class: str = ""  # natural test images
    repeated: bool = False  # PNAS: a repeated presentation of the same image
    separator: bool = True  # PNAS: ``_vs_`` between the two halves (Exp. 2) or not (Exp. 1)

    @property
    def controversial(self) -> bool:
        return self.kind != "natural"

    @property
    def filename(self) -> str:
        """The file name this record is written under (the inverse of ``parse_name``)."""
        return _build(self)

    @property
    def image(self) -> str:
        """The stimulus identity in response tables: the project's file name, or the release's
        file name without extension and without ``_repeated`` (repeats are the same image)."""
        if self.scheme == "project":
            return self.filename
        return Path(replace(self, repeated=False).filename).stem

    def targets(self) -> tuple[str, str, str, str]:
        """targeted_model_1, targeted_model_2, targeted_class_1, targeted_class_2 (empty for natural images)."""
        if not self.controversial:
            return ("", "", "", "")
        return (self.model_a, self.model_b, self.class_a, self.class_b)


def _build(name: StimulusName) -> str:
    """The file name of a record; every name the project writes goes through here."""
    if name.kind == "natural":
        if name.scheme == "pnas2020" and name.dataset == "cifar10":
            stem = f"{PNAS_DATASET_LABELS[name.dataset]}_{name.index}_{name.test_index}_{name.true_class}"
        else:
            pnas = name.scheme == "pnas2020"
            label = PNAS_DATASET_LABELS[name.dataset] if pnas else DATASETS[name.dataset].display_name
            stem = f"{label}_{name.index}_{name.true_class}"
    else:
        joint = "_vs_" if name.separator else "_"
        stem = f"{name.model_a}_{name.class_a}{joint}{name.model_b}_{name.class_b}"
        if name.scheme == "project":
            stem += f"_seed{name.seed}" if name.kind == "synthetic" else f"_natural{name.index}"
    return safe_component(stem + (REPEATED_SUFFIX if name.repeated else "") + ".png", "stimulus file name")


def stimulus_filename(model_a: str, class_a: str, model_b: str, class_b: str, seed: int) -> str:
    """File name of a synthesized stimulus (``synthesize.py``): ``<a>_<class_a>_vs_<b>_<class_b>_seed<k>.png``."""
    return StimulusName("project", "", "synthetic", model_a, class_a, model_b, class_b, seed=seed).filename


def natural_controversial_filename(model_a: str, class_a: str, model_b: str, class_b: str, test_index: int) -> str:
    """File name of a test image ranked controversial for a cell (``rank_natural.py``)."""
    return StimulusName(
        "project", "", "natural_controversial", model_a, class_a, model_b, class_b, index=str(test_index)
    ).filename


def natural_filename(dataset: str, index: int, true_class: str) -> str:
    """File name of a natural test image shown in a study (``MNIST_<index>_<class>.png``)."""
    return StimulusName("project", dataset, "natural", index=str(index), true_class=true_class).filename


def _alternatives(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


def _classes(dataset: str) -> str:
    return _alternatives(list(DATASETS[dataset].class_names))


def _project_patterns(datasets: tuple[tuple[str, str, tuple[str, ...]], ...]) -> list[tuple[str, re.Pattern]]:
    out = []
    for dataset, display_name, class_names in datasets:
        c = _alternatives(list(class_names))
        pair = rf"(?P<model_a>.+)_(?P<class_a>{c})_vs_(?P<model_b>.+)_(?P<class_b>{c})"
        out.append((dataset, re.compile(rf"^{pair}_(?:seed(?P<seed>\d+)|natural(?P<index>\d+))$")))
        out.append((dataset, re.compile(rf"^{re.escape(display_name)}_(?P<index>\d+)_(?P<true_class>{c})$")))
    return out


def _pnas_patterns() -> list[tuple[str, re.Pattern]]:
    out = []
    rep = rf"(?P<repeated>{REPEATED_SUFFIX})?"
    for dataset, handles in PNAS_MODELS.items():
        h, c = _alternatives(list(handles)), _classes(dataset)
        joint = "_" if dataset == "mnist" else "_vs_"
        out.append(
            (dataset, re.compile(rf"^(?P<model_a>{h})_(?P<class_a>{c}){joint}(?P<model_b>{h})_(?P<class_b>{c}){rep}$"))
        )
    mnist, cifar = (re.escape(PNAS_DATASET_LABELS[d]) for d in ("mnist", "cifar10"))
    out.append(("mnist", re.compile(rf"^{mnist}_(?P<index>\d+)_(?P<true_class>{_classes('mnist')}){rep}$")))
    out.append(
        (
            "cifar10",
            re.compile(rf"^{cifar}_(?P<index>\d+)_(?P<test_index>\d+)_(?P<true_class>{_classes('cifar10')}){rep}$"),
        )
    )
    return out


@lru_cache(maxsize=8)
def _patterns_of(datasets: tuple[tuple[str, str, tuple[str, ...]], ...]) -> dict[str, list[tuple[str, re.Pattern]]]:
    return {"project": _project_patterns(datasets), "pnas2020": _pnas_patterns()}


def _patterns() -> dict[str, list[tuple[str, re.Pattern]]]:
    """The patterns of every dataset known now: registering one (an imported model's folder) adds its names."""
    return _patterns_of(tuple((i.name, i.display_name, tuple(i.class_names)) for i in DATASETS.values()))


ACCEPTED: dict[str, tuple[str, ...]] = {
    "project": (
        "<model_a>_<class_a>_vs_<model_b>_<class_b>_seed<k>.png",
        "<model_a>_<class_a>_vs_<model_b>_<class_b>_natural<test index>.png",
        "MNIST_<index>_<class>.png",
        "CIFAR10_<index>_<class>.png",
    ),
    "pnas2020": (
        "<handle_1>_<digit_1>_<handle_2>_<digit_2>.png (Exp. 1)",
        "<handle_1>_<class_1>_vs_<handle_2>_<class_2>.png (Exp. 2)",
        "MNIST_<index>_<class>.png",
        "CIFAR_10_test_<index>_<CIFAR-10 test index>_<class>.png",
        "each optionally with _repeated before .png",
    ),
}


def describe_scheme(scheme: str) -> str:
    """The accepted patterns of a scheme, for error messages and docs."""
    extra = ""
    if scheme == "pnas2020":
        extra = "; handles: " + ", ".join(sorted({h for m in PNAS_MODELS.values() for h in m}))
    others = [info.display_name for name, info in DATASETS.items() if name not in ("mnist", "cifar10")]
    registered = f" or of {', '.join(others)}" if scheme == "project" and others else ""
    return "; ".join(ACCEPTED[scheme]) + f"; classes: the categories of MNIST (0-9) or CIFAR-10{registered}" + extra


def parse_name(filename: str, scheme: Scheme = "project", dataset: str | None = None) -> StimulusName:
    """Read a stimulus file name (directory part ignored). ``dataset`` restricts the classes and handles to
    one dataset's; a name no pattern reads is a ``StimulusNameError`` listing the accepted patterns."""
    patterns = _patterns()
    if scheme not in patterns:
        raise UserError(f"unknown naming scheme {scheme!r}; allowed: {', '.join(SCHEMES)}")
    name = Path(filename).name
    stem, suffix = name[:-4], name[-4:]
    if suffix.lower() == ".png":
        for data, pattern in patterns[scheme]:
            match = pattern.match(stem) if dataset in (None, data) else None
            if match:
                return _record(scheme, data, match.groupdict(), "_vs_" in stem)
    hint = "" if scheme == "pnas2020" else " (images of the PNAS 2020 release: pass naming=pnas2020)"
    raise StimulusNameError(
        f"{filename}: not a stimulus name of the {scheme!r} scheme{hint}; accepted: {describe_scheme(scheme)}"
    )


def _record(scheme: Scheme, dataset: str, groups: dict, separator: bool) -> StimulusName:
    repeated = bool(groups.get("repeated"))
    if groups.get("true_class") is not None:
        test_index = groups.get("test_index") or ""
        return StimulusName(
            scheme,
            dataset,
            "natural",
            index=groups["index"],
            test_index=test_index,
            true_class=groups["true_class"],
            repeated=repeated,
        )
    fields = {k: groups[k] for k in ("model_a", "class_a", "model_b", "class_b")}
    if groups.get("seed") is not None:
        return StimulusName(scheme, dataset, "synthetic", **fields, seed=int(groups["seed"]))
    if scheme == "project":
        return StimulusName(scheme, dataset, "natural_controversial", **fields, index=groups["index"])
    return StimulusName(scheme, dataset, "synthetic", **fields, repeated=repeated, separator=separator)


def project_model(handle: str, dataset: str) -> str:
    """This project's model for one of the paper's model handles (``small_VGG`` -> ``vgg``)."""
    try:
        return PNAS_MODELS[dataset][handle]
    except KeyError:
        known = ", ".join(PNAS_MODELS.get(dataset, {})) or "none"
        raise StimulusNameError(f"{handle!r} is not a PNAS 2020 model handle for {dataset}; known: {known}") from None
