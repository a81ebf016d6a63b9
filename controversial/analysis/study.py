"""Align human ratings and model responses into arrays, applying exclusion policies explicitly.

A ``Study`` holds human ratings (participants x stimuli x categories), model probabilities
(models x stimuli x categories) and per-stimulus metadata (condition, targets, true class). Every
exclusion is recorded in ``Study.exclusions`` so that reports show it; nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from controversial.analysis.decisions import TieRule, decide
from controversial.records.csvfile import InputError
from controversial.records.responses import ModelTable, Rating, RatingTable, natural_true_class

NATURAL = "natural"


@dataclass(frozen=True)
class Stimulus:
    image: str
    targeted_models: tuple[str, str] | None  # None for natural images
    targeted_classes: tuple[str, str] | None
    true_class: str | None

    @property
    def condition(self) -> str:
        """Bootstrap stratum: ``natural`` or the unordered targeted model pair ``A|B``."""
        if self.targeted_models is None:
            return NATURAL
        return "|".join(sorted(self.targeted_models))


@dataclass(frozen=True)
class Exclusion:
    what: str  # "rows", "participant"
    reason: str
    count: int
    detail: str = ""


@dataclass(frozen=True)
class Study:
    participants: tuple[str, ...]
    models: tuple[str, ...]
    stimuli: tuple[Stimulus, ...]
    categories: tuple[str, ...]
    human: np.ndarray  # (S, N, K)
    model: np.ndarray  # (M, N, K)
    exclusions: tuple[Exclusion, ...] = field(default=())
    # participant -> (first, second) presentation ratings of their repeated images, flattened (test-retest)
    retest: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def conditions(self) -> np.ndarray:
        return np.array([s.condition for s in self.stimuli])

    def subset(self, mask: np.ndarray) -> "Study":
        """The same study restricted to the stimuli where ``mask`` is true."""
        mask = np.asarray(mask, dtype=bool)
        return replace(
            self,
            stimuli=tuple(s for s, keep in zip(self.stimuli, mask) if keep),
            human=self.human[:, mask],
            model=self.model[:, mask],
        )

    def subsets(self) -> dict[str, np.ndarray]:
        """Named stimulus subsets: all, natural, controversial, each targeted pair, each targeted model."""
        conditions = self.conditions
        natural = conditions == NATURAL
        named = {"all": np.ones(len(self.stimuli), bool), "natural": natural, "controversial": ~natural}
        for pair in sorted(set(conditions[~natural])):
            named[f"pair {pair}"] = conditions == pair
        for model in self.models:
            targeted = np.array([s.targeted_models is not None and model in s.targeted_models for s in self.stimuli])
            if targeted.any():
                named[f"targets {model}"] = targeted
        return {name: mask for name, mask in named.items() if mask.any()}


def _category_order(categories: Sequence[str]) -> tuple[str, ...]:
    unique = list(dict.fromkeys(categories))
    if all(c.isdigit() for c in unique):
        return tuple(sorted(unique, key=int))
    return tuple(unique)


def _retest_pairs(
    repeats: Sequence[Rating],
    ratings: np.ndarray,
    subject_index: Mapping[str, int],
    images: Mapping[str, int],
    cat_index: Mapping[str, int],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The second presentations (image_repetition 1) of the analysed participants beside their first ones."""
    second: dict[str, dict[tuple[int, int], float]] = {}
    for r in repeats:
        if r.repetition == 1 and r.subject in subject_index and r.image in images and r.category in cat_index:
            second.setdefault(r.subject, {})[(images[r.image], cat_index[r.category])] = r.rating
    pairs = {}
    for subject, entries in second.items():
        where = sorted(entries)
        first = np.array([ratings[subject_index[subject], n, k] for n, k in where])
        pairs[subject] = (first, np.array([entries[key] for key in where]))
    return pairs


def _unused_files(
    attention: Mapping[str, tuple[int, int]] | None,
    min_attention_passed: float | None,
    quality_flags: Mapping[str, Sequence[str]] | None,
    exclude_flags: Sequence[str],
) -> None:
    """An attention or quality file given without the policy that uses it: refused, naming the option to add."""
    if attention is not None and min_attention_passed is None:
        raise InputError(
            "attention_checks is given but min_attention_passed is not, so the file would exclude nobody: pass "
            "min_attention_passed=<fraction of checks passed> (e.g. 1.0: every check) or leave attention_checks out"
        )
    if quality_flags is not None and not exclude_flags:
        raise InputError(
            "quality_flags is given but exclude_flags is empty, so the file would exclude nobody: pass "
            "exclude_flags=[<flag>,...] (e.g. [attention_failed,too_fast]; the study server's flags) or leave "
            "quality_flags out"
        )


def build_study(
    human: RatingTable,
    models: ModelTable,
    exclude_repetitions: bool = False,
    exclude_participants: Sequence[str] = (),
    min_natural_accuracy: float | None = None,
    tie_rule: TieRule = "random",
    seed: int = 0,
    attention: Mapping[str, tuple[int, int]] | None = None,
    min_attention_passed: float | None = None,
    quality_flags: Mapping[str, Sequence[str]] | None = None,
    exclude_flags: Sequence[str] = (),
) -> Study:
    """Validate the two tables against each other and align them.

    Policies: ``exclude_repetitions`` drops repeated presentations (image_repetition > 0), which
    are otherwise an error; ``exclude_participants`` drops listed participants (e.g. attention-check
    failures); ``min_natural_accuracy`` drops participants whose arg-max accuracy on natural images
    is below it; ``min_attention_passed`` drops participants whose fraction of passed attention
    checks (``attention``: subject -> (passed, total), see ``records.study.read_attention``) is below it;
    ``exclude_flags`` drops participants carrying any of these study-server quality flags
    (``quality_flags``: subject -> flags, see ``records.study.read_quality_flags``), one exclusion per flag.
    Each is recorded as an ``Exclusion``. A file given without its threshold or flags would exclude nobody
    in silence, so it is refused (``_unused_files``).
    """
    _unused_files(attention, min_attention_passed, quality_flags, exclude_flags)
    exclusions: list[Exclusion] = []
    rows = list(human.rows)
    repeats = [r for r in rows if r.repetition > 0]
    if repeats and not exclude_repetitions:
        first = repeats[0]
        raise InputError(
            f"{human.path}, row {first.line}, column 'image_repetition': {len(repeats)} rows are repeated "
            "presentations (image_repetition > 0); set exclude_repetitions=true to analyse first "
            "presentations only"
        )
    if exclude_repetitions:  # an active policy is reported even when it dropped nothing
        rows = [r for r in rows if r.repetition == 0]
        exclusions.append(
            Exclusion(
                "rows",
                "repeated presentation (exclude_repetitions=true)",
                len(repeats),
                f"{len({(r.subject, r.image) for r in repeats})} trials",
            )
        )
    listed = set(exclude_participants)
    known = {r.subject for r in rows}
    unknown = sorted(listed - known)
    if unknown:
        raise InputError(f"exclude_participants: unknown participant(s) {', '.join(unknown)} in {human.path}")
    if listed:
        rows = [r for r in rows if r.subject not in listed]
        exclusions.append(
            Exclusion("participant", "listed in exclude_participants (policy)", len(listed), ", ".join(sorted(listed)))
        )
    if min_attention_passed is not None:
        rows, exclusion = _exclude_inattentive(rows, attention, min_attention_passed, human)
        exclusions.append(exclusion)
    if exclude_flags:
        rows, flagged = _exclude_flagged(rows, quality_flags, exclude_flags, human)
        exclusions += flagged
    if not rows:
        raise InputError(f"{human.path}: no ratings left after exclusions")

    categories = _category_order([r.category for r in rows])
    cat_index = {c: k for k, c in enumerate(categories)}
    participants = tuple(dict.fromkeys(r.subject for r in rows))
    images: dict[str, int] = {}
    stimuli: list[Stimulus] = []
    first_row: dict[str, Rating] = {}
    for r in rows:
        if r.image not in images:
            images[r.image] = len(stimuli)
            first_row[r.image] = r
            targeted = r.targets[:2] if r.targets[0] else None
            classes = r.targets[2:] if r.targets[0] else None
            true_class = natural_true_class(r.image, categories) if targeted is None else None
            stimuli.append(Stimulus(r.image, targeted, classes, true_class))
        elif r.targets != first_row[r.image].targets:
            raise InputError(
                f"{human.path}, row {r.line}, column 'targeted_model_1': targeted columns for {r.image!r} differ "
                f"from row {first_row[r.image].line}"
            )

    order = sorted(
        range(len(stimuli)), key=lambda n: (stimuli[n].condition != NATURAL, stimuli[n].condition, stimuli[n].image)
    )
    stimuli = [stimuli[n] for n in order]
    images = {s.image: n for n, s in enumerate(stimuli)}
    S, N, K = len(participants), len(stimuli), len(categories)
    subject_index = {s: i for i, s in enumerate(participants)}
    ratings = np.full((S, N, K), np.nan)
    for r in rows:
        ratings[subject_index[r.subject], images[r.image], cat_index[r.category]] = r.rating
    _check_complete(ratings, participants, stimuli, categories, rows, human)

    model_names = tuple(dict.fromkeys(r.model for r in models.rows))
    model_index = {m: i for i, m in enumerate(model_names)}
    probabilities = np.full((len(model_names), N, K), np.nan)
    unused = set()
    for response in models.rows:
        if response.image not in images:
            unused.add(response.image)
            continue
        if response.category not in cat_index:
            raise InputError(
                f"{models.path}, row {response.line}, column 'response_category': {response.category!r} is not a "
                f"category of the human ratings ({', '.join(categories)})"
            )
        probabilities[model_index[response.model], images[response.image], cat_index[response.category]] = (
            response.probability
        )
    missing = np.argwhere(np.isnan(probabilities))
    if len(missing):
        m, n, k = missing[0]
        image = stimuli[n].image
        raise InputError(
            f"{models.path}, column 'image': model {model_names[m]!r} has no response for image {image!r}, "
            f"category {categories[k]!r} (rated in {human.path}, row {first_row[image].line}); "
            f"{len(missing)} (model, image, category) entries are missing in all"
        )
    if unused:
        exclusions.append(
            Exclusion("model rows", "image not rated by any participant", len(unused), f"{len(unused)} images")
        )

    retest = _retest_pairs(repeats, ratings, subject_index, images, cat_index)
    study = Study(
        participants, model_names, tuple(stimuli), categories, ratings, probabilities, tuple(exclusions), retest
    )
    if min_natural_accuracy is not None:
        study = _exclude_inaccurate(study, min_natural_accuracy, tie_rule, seed)
    _check_variable(study.human, study.participants, "participant", human.path, "exclude_participants=[...]")
    _check_variable(study.model, study.models, "model", models.path, "drop its rows")
    return study


def _exclude_inattentive(
    rows: list[Rating], attention: Mapping[str, tuple[int, int]] | None, threshold: float, human: RatingTable
) -> tuple[list[Rating], Exclusion]:
    if attention is None:
        raise InputError("min_attention_passed is set but no attention-check file was given (attention_checks=PATH)")
    subjects = list(dict.fromkeys(r.subject for r in rows))
    missing = [s for s in subjects if s not in attention or attention[s][1] == 0]
    if missing:
        raise InputError(f"attention checks: no record for participant(s) {', '.join(missing)} of {human.path}")
    failed = {s: attention[s] for s in subjects if attention[s][0] / attention[s][1] < threshold}
    detail = ", ".join(f"{s} ({ok}/{total})" for s, (ok, total) in failed.items())
    return (
        [r for r in rows if r.subject not in failed],
        Exclusion("participant", f"attention checks passed below {threshold:g}", len(failed), detail),
    )


def _exclude_flagged(
    rows: list[Rating], quality_flags: Mapping[str, Sequence[str]] | None, flags: Sequence[str], human: RatingTable
) -> tuple[list[Rating], list[Exclusion]]:
    if quality_flags is None:
        raise InputError("exclude_flags is set but no quality file was given (quality_flags=<participants.csv>)")
    subjects = list(dict.fromkeys(r.subject for r in rows))
    missing = [s for s in subjects if s not in quality_flags]
    if missing:
        raise InputError(f"quality flags: no record for participant(s) {', '.join(missing[:10])} of {human.path}")
    excluded: set[str] = set()
    exclusions = []
    for flag in flags:  # a participant with two flags is counted under the first policy flag only
        hit = [s for s in subjects if flag in quality_flags[s] and s not in excluded]
        excluded.update(hit)
        reason = f"study-server flag {flag} (exclude_flags)"
        exclusions.append(Exclusion("participant", reason, len(hit), ", ".join(hit)))
    return [r for r in rows if r.subject not in excluded], exclusions


def _check_variable(values: np.ndarray, names: Sequence[str], what: str, path, remedy: str) -> None:
    """A constant response pattern has no correlation with anything: say so instead of returning NaN."""
    flat = values.reshape(values.shape[0], -1)
    constant = [n for n, row in zip(names, flat) if np.ptp(row) == 0]
    if constant:
        raise InputError(
            f"{path}, column 'category_rating': {what}(s) {', '.join(constant)} gave the same value for "
            f"every (image, category), so correlations are undefined; {remedy}"
        )


def _check_complete(ratings: np.ndarray, participants, stimuli, categories, rows, human: RatingTable) -> None:
    seen = ~np.isnan(ratings).all(axis=2)  # (S, N): participant saw image
    for s, subject in enumerate(participants):
        if not seen[s].all():
            n = int(np.argmin(seen[s]))
            other = int(np.argmax(seen[:, n]))
            line = next(r.line for r in rows if r.subject == participants[other] and r.image == stimuli[n].image)
            raise InputError(
                f"{human.path}, row {line}, column 'image': participants saw different stimulus sets: "
                f"{participants[other]!r} rated {stimuli[n].image!r} but {subject!r} did not "
                f"({int((~seen[s]).sum())} images missing for {subject!r})"
            )
    holes = np.argwhere(np.isnan(ratings))
    if len(holes):
        s, n, k = holes[0]
        line = next(r.line for r in rows if r.subject == participants[s] and r.image == stimuli[n].image)
        raise InputError(
            f"{human.path}, row {line}, column 'response_category': participant {participants[s]!r} has no rating "
            f"for category {categories[k]!r} of {stimuli[n].image!r}; every image needs all of {', '.join(categories)}"
        )


def _exclude_inaccurate(study: Study, threshold: float, tie_rule: TieRule, seed: int) -> Study:
    natural = [n for n, s in enumerate(study.stimuli) if s.true_class is not None]
    if not natural:
        raise InputError("min_natural_accuracy is set but the study has no natural images with a true class")
    truth = np.array([study.categories.index(study.stimuli[n].true_class) for n in natural])
    accuracy = (decide(study.human[:, natural], tie_rule, seed) == truth).mean(axis=1)
    keep = accuracy >= threshold
    if keep.all():
        return replace(
            study,
            exclusions=study.exclusions + (Exclusion("participant", f"natural-image accuracy below {threshold:g}", 0),),
        )
    if not keep.any():
        raise InputError(
            f"min_natural_accuracy={threshold:g} excludes every participant (best accuracy {accuracy.max():.3f})"
        )
    dropped = [f"{p} ({a:.3f})" for p, a, k in zip(study.participants, accuracy, keep) if not k]
    return replace(
        study,
        participants=tuple(p for p, k in zip(study.participants, keep) if k),
        human=study.human[keep],
        exclusions=study.exclusions
        + (
            Exclusion(
                "participant", f"natural-image accuracy below {threshold:g}", int((~keep).sum()), ", ".join(dropped)
            ),
        ),
    )


def stimulus_set(models: ModelTable) -> Study:
    """A study without participants, from model responses alone (for power analysis and planning)."""
    categories = _category_order([r.category for r in models.rows])
    stimuli: dict[str, Stimulus] = {}
    for r in models.rows:
        if r.image not in stimuli:
            targeted = r.targets[:2] if r.targets[0] else None
            classes = r.targets[2:] if r.targets[0] else None
            true_class = natural_true_class(r.image, categories) if targeted is None else None
            stimuli[r.image] = Stimulus(r.image, targeted, classes, true_class)
    ordered = sorted(stimuli.values(), key=lambda s: (s.condition != NATURAL, s.condition, s.image))
    index = {s.image: n for n, s in enumerate(ordered)}
    names = tuple(dict.fromkeys(r.model for r in models.rows))
    probabilities = np.full((len(names), len(ordered), len(categories)), np.nan)
    for r in models.rows:
        probabilities[names.index(r.model), index[r.image], categories.index(r.category)] = r.probability
    missing = np.argwhere(np.isnan(probabilities))
    if len(missing):
        m, n, k = missing[0]
        raise InputError(
            f"{models.path}, column 'image': model {names[m]!r} has no response for image "
            f"{ordered[n].image!r}, category {categories[k]!r}; every model needs every (image, category)"
        )
    return Study((), names, tuple(ordered), categories, np.zeros((0, len(ordered), len(categories))), probabilities)
