"""An experiment at a glance: one manifest for a whole sweep, the paper's Fig. 2 and Fig. 3, and
a model x model matrix of acceptance rates and median scores.

A sweep dir holds one run dir per model pair (``<a>_vs_<b>/manifest.csv``); any folder of runs, or one run,
is read by the same rule as everywhere (``records.runs``). The combined manifest
keeps every row and rewrites ``image_file`` relative to the overview folder, so it can be exported
like any other manifest. A sweep of unordered pairs fills both triangles of the matrices: pair
(a, b) with classes (i, j) is the same stimulus as pair (b, a) with classes (j, i).
"""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from controversial.datasets import DatasetInfo
from controversial.errors import UserError
from controversial.figure_style import DOUBLE_COLUMN, SINGLE_COLUMN, styled
from controversial.records.manifest import ManifestRow, read_manifest
from controversial.records.runs import attempt_key, find_manifests, newest_rows, row_image
from controversial.synthesis.grids import image_matrix, plot_stimulus_grid, save_figure, show_image
from controversial.synthesis.naturalness import (
    Naturalness,
    NaturalnessOptions,
    NaturalnessUnavailable,
    naturalness,
    stimulus_images,
)
from controversial.synthesis.runstate import best_rows
from controversial.synthesis.stimuli import load_png
from controversial.untrusted import inside

log = logging.getLogger(__name__)

Pair = tuple[str, str]


@dataclass(frozen=True)
class PairSummary:
    """One model pair: how many of its attempted cells were accepted, and the median best hard score."""

    model_a: str
    model_b: str
    n_cells: int
    n_accepted: int
    median_best_hard: float
    transfer: tuple[int, int] | None = None  # accepted stimuli that every held-out instance accepts, of those scored

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_cells if self.n_cells else float("nan")


def pair_manifests(sweep_dir: Path, exclude: Path | None = None) -> list[Path]:
    """The runs' manifests under ``sweep_dir`` (a run, a sweep, or a folder of them: ``records.runs``), without
    the overview's own. Replications (the same pair run twice with other seeds, in folders of their own) are
    summarised one at a time: pooled, a pair's matrix would count each cell twice."""
    manifests = find_manifests(sweep_dir, exclude)
    _refuse_replications(sweep_dir, manifests)
    return manifests


def _refuse_replications(sweep_dir: Path, manifests: Sequence[Path]) -> None:
    """Runs of one pair that share no attempt (other seeds) are replications, not a re-run: name them."""
    attempts: dict[tuple[str, str], list[tuple[Path, set[tuple]]]] = {}
    for path in manifests:
        rows = read_manifest(path)
        for pair in {(row.model_a, row.model_b) for row in rows}:
            keys = {attempt_key(row) for row in rows if (row.model_a, row.model_b) == pair}
            attempts.setdefault(pair, []).append((path, keys))
    for runs in attempts.values():
        if len(runs) > 1 and all(a.isdisjoint(b) for i, (_, a) in enumerate(runs) for _, b in runs[i + 1 :]):
            tops = sorted({path.relative_to(sweep_dir).parts[0] for path, _ in runs})
            raise UserError(
                f"{sweep_dir} holds the replications {', '.join(tops)} (the same pair with other seeds): summarise "
                f"one at a time, e.g. sweep_dir={sweep_dir / tops[0]}"
            )


def collect_rows(manifests: Sequence[Path], out_dir: Path) -> list[ManifestRow]:
    """All rows of all runs (an attempt listed by two runs taken from the newer, with a printed note), with
    image paths relative to ``out_dir``."""
    found, notes = newest_rows(manifests)
    for note in notes:
        print(note)
    return [
        replace(row, image_file=os.path.relpath(row_image(path, row), out_dir.resolve()) if row.image_file else "")
        for path, row in found
    ]


def image_path(folder: Path, row: ManifestRow) -> Path:
    """A row's PNG, normalised so that ``../`` works before ``folder`` exists."""
    return Path(os.path.normpath(folder.resolve() / row.image_file))


def model_order(rows: Sequence[ManifestRow], preferred: Sequence[str] | None = None) -> list[str]:
    """The preferred order (e.g. the experiment's model list) for models that occur, then the rest as they appear."""
    seen = list(dict.fromkeys(m for r in rows for m in (r.model_a, r.model_b)))
    first = [m for m in (preferred or []) if m in seen]
    return first + [m for m in seen if m not in first]


def summarize_pairs(rows: Sequence[ManifestRow]) -> dict[Pair, PairSummary]:
    by_pair: dict[Pair, list[ManifestRow]] = {}
    for row in rows:
        by_pair.setdefault((row.model_a, row.model_b), []).append(row)
    summaries = {}
    for (a, b), pair_rows in by_pair.items():
        best: dict[tuple[int, int], float] = {}
        for row in pair_rows:
            key = (row.class_a, row.class_b)
            best[key] = max(best.get(key, float("-inf")), row.hard_score)
        accepted = {(r.class_a, r.class_b) for r in pair_rows if r.accepted}
        summaries[(a, b)] = PairSummary(
            a, b, len(best), len(accepted), statistics.median(best.values()), transfer(pair_rows)
        )
    return summaries


def transfer(rows: Sequence[ManifestRow]) -> tuple[int, int] | None:
    """(accepted stimuli every held-out instance also accepts, accepted stimuli with held-out scores), or None
    when no accepted row has a held-out score (no other trained instance, or a manifest from before)."""
    scored = [r.heldout_accepted for r in rows if r.accepted and r.heldout_accepted is not None]
    if not scored:
        return None
    return sum(scored), len(scored)


def transfer_text(rows: Sequence[ManifestRow]) -> str:
    """``", transfer to held-out instances 12/20 (60%)"`` for a summary line; empty without held-out scores."""
    counts = transfer(rows)
    if counts is None:
        return ""
    kept, scored = counts
    return f", transfer to held-out instances {kept}/{scored} ({100 * kept / scored:.0f}%)"


def transfer_markdown(summaries: dict[Pair, PairSummary]) -> str:
    """One line per pair with held-out scores: the transfer rate to its models' other trained instances."""
    lines = ["| pair | accepted by every held-out instance |", "|---|---|"]
    for s in summaries.values():
        if s.transfer is not None:
            kept, scored = s.transfer
            lines.append(f"| {s.model_a} vs {s.model_b} | {kept}/{scored} ({100 * kept / scored:.0f}%) |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def pair_naturalness(
    rows: Sequence[ManifestRow], out_dir: Path, dataset: DatasetInfo, options: NaturalnessOptions
) -> dict[Pair, Naturalness | NaturalnessUnavailable]:
    """Each pair's KID x 10^3 of its accepted stimuli (their PNGs, relative to ``out_dir``), or why there is none."""
    by_pair: dict[Pair, list[ManifestRow]] = {}
    for row in rows:
        by_pair.setdefault((row.model_a, row.model_b), []).append(row)
    measured: dict[Pair, Naturalness | NaturalnessUnavailable] = {}
    for pair, pair_rows in by_pair.items():
        try:
            images = stimulus_images(out_dir, [r for r in pair_rows if r.accepted])
            measured[pair] = naturalness(images, dataset, options)
        except NaturalnessUnavailable as reason:
            measured[pair] = reason
    return measured


def naturalness_markdown(measured: dict[Pair, Naturalness | NaturalnessUnavailable], dataset: DatasetInfo) -> str:
    """One line per pair: its accepted stimuli's KID x 10^3 (+- its std over subsets), or why there is none;
    the header says what real test images and uniform noise score."""
    found = [m for m in measured.values() if isinstance(m, Naturalness)]
    header = f"KID x 10^3 of each pair's accepted stimuli against {dataset.display_name}'s reference test images " + (
        f"(real test images score {found[0].floor:.1f}, uniform noise {found[0].ceiling:.0f})" if found else ""
    )
    lines = [header.rstrip(), "", "| pair | KID x 10^3 |", "|---|---|"]
    for (a, b), m in measured.items():
        shown = f"{m.kid:.0f} +- {m.kid_std:.0f}" if isinstance(m, Naturalness) else f"unavailable: {m}"
        lines.append(f"| {a} vs {b} | {shown} |")
    return "\n".join(lines) + "\n"


def _oriented(summaries: dict[Pair, PairSummary], a: str, b: str) -> PairSummary | None:
    return summaries.get((a, b)) or summaries.get((b, a))


def acceptance_markdown(summaries: dict[Pair, PairSummary], models: Sequence[str]) -> str:
    """Rows and columns are models; an entry is ``accepted/cells (median best hard score)``; '-' = not run."""
    lines = ["| | " + " | ".join(models) + " |", "|---" * (len(models) + 1) + "|"]
    for a in models:
        entries = []
        for b in models:
            s = None if a == b else _oriented(summaries, a, b)
            entries.append(
                "" if a == b else "-" if s is None else f"{s.n_accepted}/{s.n_cells} ({s.median_best_hard:.2f})"
            )
        lines.append(f"| **{a}** | " + " | ".join(entries) + " |")
    return "\n".join(lines) + "\n"


@styled
def plot_acceptance_matrix(summaries: dict[Pair, PairSummary], models: Sequence[str], path: Path) -> None:
    """Heatmap of acceptance rates; each cell is annotated with the rate and the median best hard score."""
    n = len(models)
    rates = np.full((n, n), np.nan)
    side = min(DOUBLE_COLUMN, max(SINGLE_COLUMN, 0.55 * n + 1.2))
    figure, axis = plt.subplots(figsize=(side + 0.8, side))
    for i, a in enumerate(models):
        for j, b in enumerate(models):
            s = None if i == j else _oriented(summaries, a, b)
            if s is not None:
                rates[i, j] = s.acceptance_rate
                axis.text(
                    j,
                    i,
                    f"{100 * s.acceptance_rate:.0f}%\n{s.median_best_hard:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="w" if s.acceptance_rate < 0.6 else "k",
                )
    image = axis.imshow(rates, vmin=0, vmax=1, cmap="viridis")
    axis.set_xticks(range(n), models, rotation=45, ha="right")
    axis.set_yticks(range(n), models)
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    figure.colorbar(image, ax=axis, label="cells accepted", fraction=0.046, pad=0.02)
    axis.set_title("acceptance rate (top), median best hard score (bottom)")
    save_figure(figure, path)


def _best_by_cell(rows: Sequence[ManifestRow]) -> dict[Pair, dict[tuple[int, int], ManifestRow]]:
    by_pair: dict[Pair, list[ManifestRow]] = {}
    for row in rows:
        by_pair.setdefault((row.model_a, row.model_b), []).append(row)
    return {pair: best_rows(pair_rows) for pair, pair_rows in by_pair.items()}


@styled
def plot_class_pair_matrix(
    rows: Sequence[ManifestRow], models: Sequence[str], class_a: int, class_b: int, out_dir: Path, path: Path
) -> None:
    """Fig. 2: rows are the model that should see ``class_a``, columns the one that should see ``class_b``."""
    best = _best_by_cell(rows)
    names = {r.class_a: r.class_a_name for r in rows} | {r.class_b: r.class_b_name for r in rows}
    n = len(models)
    figure, axes = image_matrix(n, n, min(DOUBLE_COLUMN, 0.75 * n + 0.8))
    for i, a in enumerate(models):
        for j, b in enumerate(models):
            axis = axes[i, j]
            row = best.get((a, b), {}).get((class_a, class_b)) or best.get((b, a), {}).get((class_b, class_a))
            if row is not None:
                show_image(axis, load_png(image_path(out_dir, row)))
                if not row.accepted:
                    axis.plot([0, 1], [0, 1], color="red", lw=1, transform=axis.transAxes)
                    axis.plot([0, 1], [1, 0], color="red", lw=1, transform=axis.transAxes)
            if j == 0:
                axis.set_ylabel(a, rotation=0, ha="right", va="center", fontsize=7)
            if i == 0:
                axis.set_title(b, fontsize=7)
    label_a, label_b = names.get(class_a, str(class_a)), names.get(class_b, str(class_b))
    figure.suptitle(
        f"'{label_a}' vs '{label_b}' for every model pair\nrows: the model that should see '{label_a}'; "
        f"columns: the one that should see '{label_b}'",
    )
    save_figure(figure, path)


def plot_pair_grids(rows: Sequence[ManifestRow], out_dir: Path) -> list[Path]:
    """Fig. 3 for every pair: ``fig3_<a>_vs_<b>.png``."""
    written = []
    class_names: dict[int, str] = {r.class_a: r.class_a_name for r in rows} | {r.class_b: r.class_b_name for r in rows}
    names = tuple(class_names.get(k, str(k)) for k in range(max(class_names, default=-1) + 1))
    for (a, b), cells in _best_by_cell(rows).items():
        path = inside(out_dir, f"fig3_{a}_vs_{b}.png", "overview figure")
        plot_stimulus_grid(
            {k: load_png(image_path(out_dir, r)) for k, r in cells.items()},
            {k: r.accepted for k, r in cells.items()},
            names,
            a,
            b,
            path,
            sorted(class_names),  # the classes the runs synthesized (all, or a chosen subset)
        )
        written.append(path)
    return written
