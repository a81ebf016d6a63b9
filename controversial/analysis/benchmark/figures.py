"""The model-vs-human benchmark's figures, each written as PDF (for print) and PNG (for the report), atomically:
accuracy against condition for the parametric datasets, bars of A, O and E per model with the human baseline,
the error-consistency matrix of each dataset, and the shape-bias plot of the cue-conflict datasets (Geirhos et
al. 2019, Fig. 4: fraction of shape decisions per category, mean lines, cue accuracy bars on the side).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from controversial.analysis.benchmark.scores import (  # noqa: E402
    HUMANS,
    HUMANS_POOLED,
    OVERALL,
    BenchmarkResults,
    BenchmarkRow,
    DatasetBenchmark,
)
from controversial.analysis.benchmark.shape_bias import ShapeBias  # noqa: E402
from controversial.atomic import atomic_write_bytes  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # typing-only: matplotlib 3.8 lacks it at run time

HUMAN_COLOUR = "#d62728"
MARKERS = "sD^vP*Xph<>"
STYLE: dict[RcKeyType, Any] = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "pdf.fonttype": 42,
}


def _colours(models: Sequence[str]) -> dict[str, tuple]:
    """A fixed colour per model (humans are always red)."""
    cmap = plt.get_cmap("tab10")
    palette = [cmap(i) for i in (0, 2, 4, 1, 5, 6, 8, 9, 7)]
    return {m: palette[i % len(palette)] for i, m in enumerate(models)}


def _save(fig: plt.Figure, path: Path) -> Path:
    """``path`` (.png) and the same name as .pdf."""
    for fmt, target in (("png", path), ("pdf", path.with_suffix(".pdf"))):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=200, bbox_inches="tight")
        atomic_write_bytes(target, buffer.getvalue())
    plt.close(fig)
    return path


def _models(block: DatasetBenchmark) -> list[str]:
    return [n for n, h in zip(block.names, block.is_human) if not h]


def accuracy_vs_condition(block: DatasetBenchmark, colours: dict[str, tuple], path: Path) -> Path:
    """Accuracy per condition: the humans' mean with their range (shaded), a line per model; the conditions the
    benchmark leaves out of its numbers are greyed."""
    acc = np.asarray(block.accuracy_by_condition, dtype=float)
    humans = acc[np.asarray(block.is_human)]
    x = np.arange(len(block.conditions))
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(5.2, 3.8))
        for i, c in enumerate(block.conditions):
            if c in block.excluded_conditions:
                ax.axvspan(i - 0.5, i + 0.5, color="0.92", zorder=0, lw=0)
        ax.fill_between(x, humans.min(axis=0), humans.max(axis=0), color=HUMAN_COLOUR, alpha=0.18, lw=0)
        ax.plot(x, humans.mean(axis=0), "o-", color=HUMAN_COLOUR, lw=2, label=f"humans (mean, range; n={len(humans)})")
        for k, name in enumerate(_models(block)):
            i = block.names.index(name)
            ax.plot(x, acc[i], marker=MARKERS[k % len(MARKERS)], color=colours[name], lw=1.5, label=name)
        ax.set_xticks(x, block.conditions)
        ax.set_ylim(0, 1.02)
        ax.set_xlim(-0.5, len(x) - 0.5)
        ax.set_xlabel("condition" + (" (grey: not in the benchmark's numbers)" if block.excluded_conditions else ""))
        ax.set_ylabel("accuracy")
        ax.set_title(block.dataset)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return _save(fig, path)


def metric_bars(rows: Sequence[BenchmarkRow], colours: dict[str, tuple], path: Path, title: str) -> Path:
    """Three panels (A, O, E), a bar per model sorted best first, the human baseline as a bar and a dashed line."""
    metrics = (
        ("accuracy_difference", "accuracy difference (lower: more human-like)", False),
        ("observed_consistency", "observed consistency", True),
        ("error_consistency", "error consistency (kappa)", True),
    )
    models = [r for r in rows if r.name != HUMANS]
    baseline = next(r for r in rows if r.name == HUMANS)
    height = 0.42 * (len(models) + 1) + 1.4
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 3, figsize=(12, height), sharey=False)
        for ax, (field, label, descending) in zip(axes, metrics):
            order = sorted(models, key=lambda r: getattr(r, field), reverse=not descending)
            shown = order + [baseline]
            values = [getattr(r, field) for r in shown]
            y = np.arange(len(shown))
            bounds = [r.ci[field] if r.ci else [v, v] for r, v in zip(shown, values)]
            err = (
                np.abs(np.array(bounds, dtype=float).T - np.array(values, dtype=float))
                if any(r.ci for r in shown)
                else None
            )
            ax.barh(
                y,
                values,
                xerr=err,
                color=[colours.get(r.name, HUMAN_COLOUR) for r in shown],
                height=0.7,
                error_kw={"lw": 0.8, "capsize": 2},
            )
            ax.axvline(getattr(baseline, field), color=HUMAN_COLOUR, ls="--", lw=1.2)
            ax.axvline(0, color="0.3", lw=0.8)
            ax.set_yticks(y, [r.name for r in shown])
            ax.set_xlabel(label)
            ax.spines[["top", "right"]].set_visible(False)
        axes[0].set_title("accuracy difference")
        axes[1].set_title("observed consistency")
        axes[2].set_title("error consistency")
        fig.suptitle(f"{title}: models against humans; red: humans against the other humans", y=1.0)
        fig.tight_layout()
        return _save(fig, path)


def kappa_matrix(block: DatasetBenchmark, path: Path) -> Path:
    """The per-condition-averaged kappa of every pair: humans first (by mean kappa with the other humans), then
    the models (by error consistency with humans), values written in the cells."""
    kappa = np.asarray(block.kappa, dtype=float)
    is_human = np.asarray(block.is_human)
    ec = np.asarray(block.error_consistency)
    order = sorted(range(len(block.names)), key=lambda i: (not is_human[i], -ec[i]))
    k = kappa[np.ix_(order, order)]
    np.fill_diagonal(k, np.nan)
    n = len(order)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(0.55 * n + 2.6, 0.55 * n + 1.6))
        image = ax.imshow(k, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_xticks(range(n), [block.names[i] for i in order], rotation=60, ha="right")
        ax.set_yticks(range(n), [block.names[i] for i in order])
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            for label, i in zip(labels, order):
                label.set_color(HUMAN_COLOUR if is_human[i] else "#1f3b73")
        if n <= 16:
            for r in range(n):
                for c in range(n):
                    if np.isfinite(k[r, c]):
                        ax.text(
                            c,
                            r,
                            f"{k[r, c]:.2f}".replace("-0.00", "0.00"),
                            ha="center",
                            va="center",
                            fontsize=7,
                            color="white" if abs(k[r, c]) > 0.6 else "black",
                        )
        boundary = int(is_human.sum()) - 0.5
        if 0 < boundary < n - 1:
            ax.axhline(boundary, color="k", lw=1.5)
            ax.axvline(boundary, color="k", lw=1.5)
        fig.colorbar(image, ax=ax, shrink=0.8, label="error consistency (kappa)")
        ax.set_title(f"{block.dataset}: kappa per condition, averaged (red: humans)")
        return _save(fig, path)


def shape_bias_plot(
    bias: dict[str, ShapeBias], models: Sequence[str], colours: dict[str, tuple], path: Path, title: str
) -> Path:
    """Fraction of shape decisions per shape category (sorted by the humans'), a marker per decision maker,
    vertical lines at each one's overall shape bias; on the right, the fraction of trials answered with either
    cue per category."""
    humans = bias[HUMANS_POOLED]
    categories = sorted(humans.per_category, key=lambda c: humans.per_category[c])
    shown = [HUMANS_POOLED] + list(models)
    colour = {HUMANS_POOLED: HUMAN_COLOUR, **colours}
    marker = {HUMANS_POOLED: "o", **{m: MARKERS[k % len(MARKERS)] for k, m in enumerate(models)}}
    y = np.arange(len(categories))
    with plt.rc_context(STYLE):
        fig, (ax, side) = plt.subplots(
            1, 2, figsize=(9, 0.36 * len(categories) + 2.2), sharey=True, gridspec_kw={"width_ratios": [4, 1]}
        )
        for i in range(len(categories) - 1):
            ax.axhline(i + 0.5, color="0.85", lw=0.6, ls=":")
        width = 0.8 / len(shown)
        for k, name in enumerate(shown):
            b = bias[name]
            values = [b.per_category.get(c, np.nan) for c in categories]
            ax.axvline(b.shape_bias, color=colour[name], lw=1.3, alpha=0.9)
            ax.scatter(
                values,
                y,
                marker=marker[name],
                color=colour[name],
                s=55,
                zorder=3,
                edgecolor="white",
                lw=0.5,
                label=f"{'humans' if name == HUMANS_POOLED else name} (shape bias {b.shape_bias:.2f})",
            )
            accuracy = [b.per_category_cue_accuracy.get(c, np.nan) for c in categories]
            side.barh(y - 0.4 + (k + 0.5) * width, accuracy, height=width, color=colour[name])
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.6, len(categories) - 0.4)
        ax.set_yticks(y, categories)
        ax.set_xlabel("fraction of 'shape' decisions")
        top = ax.secondary_xaxis("top", functions=(lambda v: 1 - v, lambda v: 1 - v))
        top.set_xlabel("fraction of 'texture' decisions")
        ax.set_ylabel("shape category")
        ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(3, len(shown)))
        side.set_xlim(0, 1)
        side.set_title("cue accuracy", fontsize=10)
        side.set_xlabel("shape or texture\ndecisions / trials")
        side.spines[["top", "right"]].set_visible(False)
        fig.suptitle(title)
        fig.tight_layout()
        return _save(fig, path)


def draw_benchmark(results: BenchmarkResults, out: Path) -> dict[str, str]:
    """Every benchmark figure into ``out``; returns name -> PNG path relative to ``out`` (PDFs beside them)."""
    out = Path(out)
    made: dict[str, str] = {}
    models = list(dict.fromkeys(m for b in results.datasets.values() for m in _models(b)))
    colours = _colours(models)

    def add(name: str, path: Path) -> None:
        made[name] = str(path.relative_to(out))

    for name, block in results.datasets.items():
        slug = name.replace(" ", "_")
        if len(block.conditions) > 1:
            add(
                f"accuracy vs condition ({name})",
                accuracy_vs_condition(block, colours, out / f"fig_mvh_accuracy_{slug}.png"),
            )
        add(f"error-consistency matrix ({name})", kappa_matrix(block, out / f"fig_mvh_kappa_{slug}.png"))
        if name in results.shape_bias:
            add(
                f"shape bias ({name})",
                shape_bias_plot(
                    results.shape_bias[name],
                    _models(block),
                    colours,
                    out / f"fig_mvh_shape_bias_{slug}.png",
                    f"{name}: shape vs texture decisions",
                ),
            )
    if models and OVERALL in results.tables:
        add(
            "benchmark metrics",
            metric_bars(
                results.tables[OVERALL],
                colours,
                out / "fig_mvh_metrics.png",
                f"over the {len(results.overall_datasets)} datasets that hold every model"
                + (f" ({100 * results.level:g}% CIs: humans resampled)" if results.overall_resamples else ""),
            ),
        )
    return made
