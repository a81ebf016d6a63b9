"""How closely this project's zoo reproduces the PNAS 2020 models, measured on the paper's own stimuli.

Each controversial stimulus of the release was optimised so that the paper's model A sees class a (and
not b) while model B sees b (and not a). Scoring our corresponding models on it asks: does our A detect a
and reject b, does our B detect b and reject a, and how controversial is the image for our pair (the hard
score, min of the four sigmoid terms of Eq. 2)? Natural images give each model's accuracy, and the
agreement matrix (fraction of images on which two of our models make the same arg-max decision) shows
whether our models differ where the paper's did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controversial.analysis.model_responses import StimulusImage
from controversial.records.fidelity import FidelityRow
from controversial.records.names import project_model

DETECT = 0.5  # a calibrated sigmoid probability at or above this counts as "sees the class"


@dataclass(frozen=True)
class ModelFidelity:
    """One of our models on the stimuli that targeted its paper counterpart."""

    model: str
    handle: str  # the paper's model it stands in for
    n_stimuli: int
    detects: float  # fraction with p(the class the paper's model was driven to see) >= DETECT
    rejects: float  # fraction with p(the other class) < DETECT
    both: float
    natural_accuracy: float  # arg-max accuracy on the natural images (NaN without any)


@dataclass(frozen=True)
class Fidelity:
    dataset: str
    models: tuple[str, ...]  # ours, in the order of ``probabilities``
    per_model: tuple[ModelFidelity, ...]
    rows: tuple[FidelityRow, ...]  # one per controversial stimulus whose two models are both available
    agreement: np.ndarray  # (M, M) fraction of all images with the same arg-max decision
    missing: dict[str, str]  # paper handle -> our model that is not available
    skipped: int  # controversial stimuli without a hard score because one of their models is missing


def model_fidelity(
    stimuli: list[StimulusImage],
    probabilities: np.ndarray,
    models: tuple[str, ...],
    classes: tuple[str, ...],
    dataset: str,
) -> Fidelity:
    """Score our models (``probabilities``: (M, N, K) for ``models``) on PNAS stimuli parsed by ``records.names``."""
    index = {m: i for i, m in enumerate(models)}
    rows, missing, skipped = [], {}, 0
    seen: dict[str, list[tuple[bool, bool]]] = {m: [] for m in models}
    handles: dict[str, str] = {}
    for n, stimulus in enumerate(stimuli):
        name = stimulus.name
        if name is None or not name.controversial:
            continue
        ours = (project_model(name.model_a, dataset), project_model(name.model_b, dataset))
        for handle, model in zip((name.model_a, name.model_b), ours):
            handles.setdefault(model, handle)
            if model not in index:
                missing[handle] = model
        ka, kb = classes.index(name.class_a), classes.index(name.class_b)
        for model, (mine, other) in zip(ours, ((ka, kb), (kb, ka))):
            if model in index:
                p = probabilities[index[model], n]
                seen[model].append((p[mine] >= DETECT, p[other] < DETECT))
        if any(m not in index for m in ours):
            skipped += 1
            continue
        pa, pb = probabilities[index[ours[0]], n], probabilities[index[ours[1]], n]
        hard = float(min(pa[ka], 1 - pa[kb], pb[kb], 1 - pb[ka]))
        rows.append(
            FidelityRow(
                stimulus.image,
                name.model_a,
                name.class_a,
                name.model_b,
                name.class_b,
                *ours,
                float(pa[ka]),
                float(pa[kb]),
                float(pb[kb]),
                float(pb[ka]),
                hard,
            )
        )
    decisions = probabilities.argmax(axis=2)
    natural = [
        (n, classes.index(s.name.true_class))
        for n, s in enumerate(stimuli)
        if s.name is not None and s.name.kind == "natural"
    ]
    per_model = []
    for m, model in enumerate(models):
        outcomes = np.array(seen[model], dtype=bool).reshape(-1, 2)
        accuracy = float(np.mean([decisions[m, n] == k for n, k in natural])) if natural else float("nan")
        if len(outcomes):
            detects, rejects = float(outcomes[:, 0].mean()), float(outcomes[:, 1].mean())
            both = float(outcomes.all(axis=1).mean())
        else:
            detects = rejects = both = float("nan")
        handle = handles.get(model, "")
        per_model.append(ModelFidelity(model, handle, len(outcomes), detects, rejects, both, accuracy))
    agreement = (decisions[:, None, :] == decisions[None, :, :]).mean(axis=2)
    return Fidelity(dataset, models, tuple(per_model), tuple(rows), agreement, missing, skipped)


def report_lines(fidelity: Fidelity, folder: str, note: str) -> list[str]:
    """The markdown report: per-model detection, the hard-score summary, the agreement matrix."""

    def f(x: float) -> str:
        return "n/a" if not np.isfinite(x) else f"{x:.3f}"

    lines = [
        f"# Fidelity of this project's models to the PNAS 2020 models ({fidelity.dataset})",
        "",
        f"- stimuli: `{folder}`",
        f"- display convention: {note}",
        "",
    ]
    if fidelity.missing:
        absent = ", ".join(f"{m} (for {h})" for h, m in fidelity.missing.items())
        lines += [
            f"- not available (not trained yet): {absent}; {fidelity.skipped} controversial stimuli that "
            "target them have no hard score",
            "",
        ]
    lines += [
        "## Does our model see what the paper's model was driven to see?",
        "",
        "| our model | paper's model | stimuli | detects its class | rejects the other | both | natural accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in fidelity.per_model:
        cells = [
            m.model,
            m.handle or "-",
            str(m.n_stimuli),
            *map(f, (m.detects, m.rejects, m.both, m.natural_accuracy)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    hard = np.array([r.hard_score for r in fidelity.rows])
    lines += [
        "",
        f"A stimulus counts as detected when p >= {DETECT} (calibrated sigmoid).",
        "",
        "## Hard score under our two corresponding models",
        "",
    ]
    if len(hard):
        pairs: dict[tuple[str, str], list[float]] = {}
        for r in fidelity.rows:
            pairs.setdefault((r.model_1, r.model_2), []).append(r.hard_score)
        lines += ["| our pair | stimuli | median hard score | >= 0.5 | >= 0.75 |", "|---|---|---|---|---|"]
        for (a, b), values in sorted(pairs.items()):
            v = np.array(values)
            lines.append(
                f"| {a} vs {b} | {len(v)} | {np.median(v):.3f} | {np.mean(v >= 0.5):.2f} | {np.mean(v >= 0.75):.2f} |"
            )
        lines += ["", "Per stimulus: `fidelity.csv`.", ""]
    else:
        lines += ["No controversial stimulus has both of its models available.", ""]
    lines += [
        "## Agreement between our models (fraction of all images with the same arg-max decision)",
        "",
        "| | " + " | ".join(fidelity.models) + " |",
        "|---" * (len(fidelity.models) + 1) + "|",
    ]
    for i, model in enumerate(fidelity.models):
        lines.append(f"| {model} | " + " | ".join(f"{v:.2f}" for v in fidelity.agreement[i]) + " |")
    return lines + [""]
