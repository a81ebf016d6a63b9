"""Figures from the results of ``pipeline.py`` (the dataclasses of ``results.py``; matplotlib, headless).

Each function takes the relevant part of the results and a path, and writes one PNG and a PDF beside it
atomically, in the project's one figure style (``controversial.figure_style``):
Fig. 4-style model comparison, its per-subset version, an error-consistency heatmap, the
c_obs-vs-c_exp scatter with bounds and null band, and kappa vs accuracy.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from controversial.analysis.benchmark.figures import draw_benchmark
from controversial.analysis.bootstrap import LOWER
from controversial.analysis.error_consistency import kappa_bounds
from controversial.analysis.results import AnalysisResults, ConsistencyBlock, SubsetResult
from controversial.figure_style import DOUBLE_COLUMN, SINGLE_COLUMN, save, styled

KAPPA_CMAP = "RdBu_r"  # diverging: blue below chance, red above, white at 0
NA_COLOUR = "0.55"  # undefined cells, named in the legend


def _save(fig: plt.Figure, path: str | Path) -> Path:
    """The PNG at ``path`` and a PDF beside it (``figure_style.save``)."""
    return save(fig, path)


def _order(subset: SubsetResult) -> list[str]:
    """Models from the best mean Pearson r to the worst (top to bottom in every figure)."""
    means = subset.measures["pearson"].mean
    return sorted(means, key=means.__getitem__, reverse=True)


def _bars(ax: plt.Axes, subset: SubsetResult, order: list[str], dots: bool) -> None:
    """Mean r per model (best on top) with bootstrap CIs, the noise-ceiling band, and optionally a dot per
    participant; every element is in the legend."""
    if subset.not_scored:  # the reason in the panel, never a blank one
        ax.text(
            0.5,
            0.5,
            "not scored:\n" + textwrap.fill(subset.not_scored, 34),
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    pearson = subset.measures["pearson"]
    ceiling = subset.noise_ceiling["pearson"]
    y = np.arange(len(order))[::-1]  # the best model at the top
    means = np.array([pearson.mean[m] for m in order])
    ax.axvspan(ceiling.lower, ceiling.upper, color="0.85", zorder=0, lw=0, label="noise ceiling (lower to upper)")
    ci = subset.bootstrap.ci if subset.bootstrap else None
    err = None
    if ci:
        bounds = np.array([ci[m] for m in order])
        err = np.abs(bounds.T - means)
    label = f"mean r, {100 * subset.bootstrap.ci_level:g}% CI" if subset.bootstrap else "mean r"
    ax.barh(
        y, means, xerr=err, color="tab:blue", alpha=0.7, height=0.6, error_kw={"lw": 0.8, "capsize": 2}, label=label
    )
    if dots:
        rng = np.random.default_rng(0)
        for i, m in zip(y, order):
            values = np.asarray(pearson.per_participant[m])
            ax.scatter(
                values,
                i + rng.uniform(-0.2, 0.2, len(values)),
                s=3,
                color="k",
                alpha=0.6,
                lw=0,
                zorder=3,
                label="participants" if i == y[0] else None,
            )
    ax.set_yticks(y, order)
    ax.set_ylim(-0.6, len(order) - 0.4)
    ax.set_xlabel("Pearson r with human ratings")


@styled
def model_comparison(subset: SubsetResult, path: str | Path, title: str = "all stimuli") -> Path:
    """Fig. 4 style: a dot per participant per model, mean bars with bootstrap CIs, the ceiling band
    (lower to upper bound), and the significance matrix (row significantly above column), both in the same
    top-to-bottom order, so the matrix's diagonal runs from top left to bottom right."""
    order = _order(subset)
    fig, (ax, ax_sig) = plt.subplots(
        1, 2, figsize=(DOUBLE_COLUMN, max(2.8, 0.2 * len(order) + 1.3)), gridspec_kw={"width_ratios": [1.6, 1]}
    )
    _bars(ax, subset, order, dots=True)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=6, borderaxespad=0.2)
    ax.set_title(title, pad=16)
    tests = subset.bootstrap.pairwise if subset.bootstrap else None
    if tests:
        names = tests.names
        idx = [names.index(n) for n in order + [LOWER] if n in names]
        sig = np.asarray(tests.significance)[np.ix_(idx, idx)]
        ax_sig.imshow(sig, cmap=ListedColormap(["tab:red", "0.9", "tab:blue"]), vmin=-1, vmax=1)
        labels = [names[i] for i in idx]
        ax_sig.set_xticks(range(len(idx)), labels, rotation=90)
        ax_sig.set_yticks(range(len(idx)), labels)
        ax_sig.tick_params(length=0)
        for spine in ax_sig.spines.values():
            spine.set_visible(False)
        ax_sig.legend(
            handles=[
                Patch(color="tab:blue", label="row > column"),
                Patch(color="tab:red", label="row < column"),
                Patch(color="0.9", label="not significant"),
            ],
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            fontsize=6,
        )
        ax_sig.set_title(f"bootstrap tests, Holm-Sidak, alpha {tests.alpha}")
    else:
        ax_sig.axis("off")
    fig.tight_layout()
    return _save(fig, path)


@styled
def subset_comparison(prediction: dict[str, SubsetResult], path: str | Path, subsets: list[str]) -> Path:
    """One small panel per stimulus subset (means, CIs where bootstrapped, ceiling band), models in one order."""
    cols = min(3, len(subsets))
    rows = -(-len(subsets) // cols)
    order = _order(prediction["all"])
    fig, axes = plt.subplots(
        rows, cols, figsize=(DOUBLE_COLUMN, rows * (0.15 * len(order) + 0.9)), squeeze=False, sharex=True
    )
    for ax, name in zip(axes.ravel(), subsets):
        _bars(ax, prediction[name], order, dots=False)
        no_ci = "" if prediction[name].bootstrap or prediction[name].not_scored else "; no CI: not resampled"
        ax.set_title(f"{name} ({prediction[name].n_stimuli} stimuli, {prediction[name].n_participants} people{no_ci})")
        ax.tick_params(labelbottom=True)  # shared x: every panel keeps its scale (one above an empty slot too)
    for ax in axes.ravel()[len(subsets) :]:
        ax.axis("off")
    handles, labels = next(
        (ax.get_legend_handles_labels() for ax in axes.ravel() if ax.get_legend_handles_labels()[0]), ([], [])
    )
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=len(handles), bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout()
    return _save(fig, path)


@styled
def kappa_heatmap(kappa: list, names: list[str], path: str | Path, title: str) -> Path:
    """All-pairs kappa matrix; the diagonal (self-agreement) is blanked so the colour scale shows the pairs.
    Tick labels shrink with the number of decision makers, never below 5 pt at print size."""
    k = np.array(kappa, dtype=float)
    np.fill_diagonal(k, np.nan)
    size = min(DOUBLE_COLUMN, max(SINGLE_COLUMN, 0.12 * len(names) + 1.2))
    fontsize = max(5.0, min(7.0, 72 * (size - 1.2) / max(len(names), 1) * 0.8))
    fig, ax = plt.subplots(figsize=(size + 0.6, size))
    # Kappa's own range on a diverging map centred at 0 (chance agreement): the same colour means the same
    # kappa in every figure, and a spread of -0.05..0 stays pale instead of filling the scale.
    cmap = plt.get_cmap(KAPPA_CMAP).with_extremes(bad=NA_COLOUR)
    image = ax.imshow(k, cmap=cmap, vmin=-1, vmax=1)
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(names)), names, fontsize=fontsize)
    ax.tick_params(length=0)
    fig.colorbar(image, ax=ax, label="kappa (0: chance agreement)", fraction=0.046, pad=0.02)
    ax.legend(
        handles=[Patch(color=NA_COLOUR, label="n/a: the diagonal, or kappa undefined (c_exp = 1 or no shared trials)")],
        loc="upper left",
        bbox_to_anchor=(0.0, -0.02 - 0.03 * max(len(n) for n in names) * fontsize / 7),
        fontsize=5.5,
        frameon=False,
    )
    ax.set_title(title)
    return _save(fig, path)


@styled
def cobs_vs_cexp(block: ConsistencyBlock, is_human: np.ndarray, path: str | Path, title: str) -> Path:
    """c_obs against c_exp for every pair, with the analytic bounds and the null band of independent observers;
    each model's pairs with the participants are drawn in that model's colour and named in the legend."""
    whole = block.whole
    c_obs, c_exp = np.asarray(whole.c_obs, float), np.asarray(whole.c_exp, float)
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN, SINGLE_COLUMN))
    e = np.linspace(0, 1, 401)
    k_low, k_high = kappa_bounds(e)
    ax.plot(e, e + k_low * (1 - e), color="0.4", lw=0.8, label="bounds")
    ax.plot(e, e + k_high * (1 - e), color="0.4", lw=0.8)
    ax.plot([0, 1], [0, 1], color="0.6", ls=":", lw=0.8)
    band = block.null_band
    edges = np.asarray(band.bin_edges)
    centres = (edges[:-1] + edges[1:]) / 2
    obs_band = np.asarray(band.c_obs, float)
    ax.fill_between(
        centres,
        obs_band[:, 0],
        obs_band[:, 1],
        color="tab:orange",
        alpha=0.3,
        lw=0,
        label=f"independent observers (n={block.n_trials})",
    )
    humans, models = np.flatnonzero(is_human), np.flatnonzero(~is_human)
    groups = [("human-human", [(i, j) for n, i in enumerate(humans) for j in humans[n + 1 :]], "0.3", "o")]
    groups += [(f"{block.names[m]}-human", [(m, h) for h in humans], f"C{n % 10}", "s") for n, m in enumerate(models)]
    groups.append(("model-model", [(i, j) for n, i in enumerate(models) for j in models[n + 1 :]], "k", "x"))
    for label, pairs, colour, marker in groups:
        x = np.array([c_exp[i, j] for i, j in pairs], float)
        y = np.array([c_obs[i, j] for i, j in pairs], float)
        shown = np.isfinite(x) & np.isfinite(y)
        if shown.any():  # a group with no pair is not named in the legend
            ax.scatter(x[shown], y[shown], s=6, color=colour, marker=marker, lw=0.5, label=label, zorder=3)
    ax.set_xlabel("c_exp (agreement expected by chance)")
    ax.set_ylabel("c_obs (observed agreement)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.legend(loc="upper left", fontsize=6)
    ax.set_title(title)
    return _save(fig, path)


def _finite_mean(values: list[float]) -> float:
    """The mean of the defined kappas (a pair whose kappa is 0/0 is NaN); NaN, not a warning, when none is."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


@styled
def kappa_vs_accuracy(block: ConsistencyBlock, is_human: np.ndarray, path: str | Path, title: str) -> Path:
    """Each decision maker's accuracy against its mean kappa with the human participants."""
    k = np.asarray(block.whole.kappa, float)
    accuracy = np.asarray(block.whole.accuracy, float)
    humans = np.flatnonzero(is_human)
    mean_k = np.array([_finite_mean([k[d, h] for h in humans if h != d]) for d in range(len(k))])
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN, 0.8 * SINGLE_COLUMN))
    ax.scatter(accuracy[is_human], mean_k[is_human], s=8, color="0.4", label="participants")
    if (~is_human).any():
        ax.scatter(accuracy[~is_human], mean_k[~is_human], s=12, marker="s", color="tab:blue", label="models")
    for d in np.flatnonzero(~is_human):
        ax.annotate(block.names[d], (accuracy[d], mean_k[d]), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.axhline(0, color="0.6", lw=0.8, ls=":")
    ax.set_xlabel("accuracy")
    ax.set_ylabel("mean kappa with participants")
    ax.legend()
    ax.set_title(title)
    return _save(fig, path)


@styled
def power_plot(
    n_participants: list[int], power: list[float], se: list[float], target: float, path: str | Path, title: str
) -> Path:
    """Estimated power (with Monte Carlo SE) against the number of participants."""
    fig, ax = plt.subplots(figsize=(SINGLE_COLUMN, 0.75 * SINGLE_COLUMN))
    ax.errorbar(n_participants, power, yerr=se, marker="o", ms=3, capsize=2, label="estimated power (MC SE)")
    ax.axhline(target, color="0.5", ls="--", lw=0.8, label=f"target power {target:g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("participants")
    ax.set_ylabel("power")
    ax.legend()
    ax.set_title(textwrap.fill(title, 60))
    return _save(fig, path)


def draw_all(results: AnalysisResults, out: Path) -> dict[str, str]:
    """Every figure the results of ``pipeline.py`` support, into ``out``; returns name -> relative path."""
    out = Path(out)
    made: dict[str, str] = {}

    def add(name: str, path: Path) -> None:
        made[name] = str(path.relative_to(out))

    if results.prediction is not None:
        prediction = results.prediction
        add("model comparison", model_comparison(prediction["all"], out / "fig_model_comparison.png"))
        subsets = [s for s in prediction if s in ("natural", "controversial") or s.startswith("targets ")]
        if subsets:
            add("subsets", subset_comparison(prediction, out / "fig_subsets.png", subsets))
    ec = results.error_consistency
    blocks = [("natural", ec.natural)] if ec and ec.natural else []
    blocks += [(f"choices {dataset}", block) for dataset, block in (results.choices or {}).items()]
    for label, block in blocks:
        name = label.replace(" ", "_")
        is_human = np.asarray(block.is_human, dtype=bool)
        add(
            f"kappa heatmap ({label})",
            kappa_heatmap(
                block.whole.kappa, block.names, out / f"fig_kappa_{name}.png", f"error consistency ({label})"
            ),
        )
        add(f"c_obs vs c_exp ({label})", cobs_vs_cexp(block, is_human, out / f"fig_cobs_cexp_{name}.png", label))
        add(
            f"kappa vs accuracy ({label})",
            kappa_vs_accuracy(block, is_human, out / f"fig_kappa_accuracy_{name}.png", label),
        )
    if ec and ec.controversial:
        add(
            "categorical kappa (controversial)",
            kappa_heatmap(
                ec.controversial.whole.kappa,
                ec.controversial.names,
                out / "fig_kappa_controversial.png",
                "Cohen's kappa of decisions (controversial stimuli)",
            ),
        )
    if results.benchmark:
        made.update(draw_benchmark(results.benchmark, out))
    return made
