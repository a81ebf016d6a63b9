"""Figures from the results of ``pipeline.py`` (the dataclasses of ``results.py``; matplotlib, headless).

Each function takes the relevant part of the results and a path, and writes one PNG atomically:
Fig. 4-style model comparison, its per-subset version, an error-consistency heatmap, the
c_obs-vs-c_exp scatter with bounds and null band, and kappa vs accuracy.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from controversial.analysis.bootstrap import LOWER  # noqa: E402
from controversial.analysis.error_consistency import kappa_bounds  # noqa: E402
from controversial.analysis.results import AnalysisResults, ConsistencyBlock, SubsetResult  # noqa: E402
from controversial.atomic import atomic_write_bytes  # noqa: E402


def _save(fig: plt.Figure, path: str | Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)


def _order(subset: SubsetResult) -> list[str]:
    means = subset.measures["pearson"].mean
    return sorted(means, key=means.get)


def _bars(ax: plt.Axes, subset: SubsetResult, order: list[str], dots: bool) -> None:
    if subset.not_scored:  # the reason in the panel, never a blank one
        ax.text(
            0.5,
            0.5,
            "not scored:\n" + textwrap.fill(subset.not_scored, 40),
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=8,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    pearson = subset.measures["pearson"]
    ceiling = subset.noise_ceiling["pearson"]
    y = np.arange(len(order))
    means = np.array([pearson.mean[m] for m in order])
    ax.axvspan(ceiling.lower, ceiling.upper, color="0.85", zorder=0, label="noise ceiling")
    ax.axvline(ceiling.upper, color="0.3", ls="--", lw=1)
    ci = subset.bootstrap.ci if subset.bootstrap else None
    err = None
    if ci:
        bounds = np.array([ci[m] for m in order])
        err = np.abs(bounds.T - means)
    ax.barh(y, means, xerr=err, color="tab:blue", alpha=0.6, height=0.6, capsize=3)
    if dots:
        rng = np.random.default_rng(0)
        for i, m in enumerate(order):
            values = np.asarray(pearson.per_participant[m])
            ax.scatter(values, i + rng.uniform(-0.2, 0.2, len(values)), s=6, color="k", alpha=0.6, zorder=3)
        lower = np.asarray(ceiling.lower_per_participant)
        ax.scatter(
            lower, np.full(len(lower), len(order)) + rng.uniform(-0.2, 0.2, len(lower)), s=6, color="0.5", zorder=3
        )
        ax.barh([len(order)], [ceiling.lower], color="k", height=0.6)
        ax.set_yticks(list(y) + [len(order)], order + [LOWER])
    else:
        ax.set_yticks(y, order)
    ax.set_xlabel("Pearson r with human ratings")


def model_comparison(subset: SubsetResult, path: str | Path, title: str = "all stimuli") -> Path:
    """Fig. 4 style: a dot per participant per model, mean bars with bootstrap CIs, the ceiling band
    (lower to upper bound), and the significance matrix (row significantly above column)."""
    order = _order(subset)
    fig, (ax, ax_sig) = plt.subplots(1, 2, figsize=(11, 0.45 * len(order) + 2.5), gridspec_kw={"width_ratios": [2, 1]})
    _bars(ax, subset, order, dots=True)
    ax.set_title(title)
    tests = subset.bootstrap.pairwise if subset.bootstrap else None
    if tests:
        names = tests.names
        idx = [names.index(n) for n in order + [LOWER] if n in names]
        sig = np.asarray(tests.significance)[np.ix_(idx, idx)]
        ax_sig.imshow(sig, cmap="coolwarm_r", vmin=-1, vmax=1, origin="lower")  # rows in the bar order
        labels = [names[i] for i in idx]
        ax_sig.set_xticks(range(len(idx)), labels, rotation=90, fontsize=7)
        ax_sig.set_yticks(range(len(idx)), labels, fontsize=7)
        ax_sig.set_title(f"row vs column (Holm-Sidak, alpha={tests.alpha})\nblue: higher, red: lower", fontsize=8)
    else:
        ax_sig.axis("off")
    return _save(fig, path)


def subset_comparison(prediction: dict[str, SubsetResult], path: str | Path, subsets: list[str]) -> Path:
    """One small panel per stimulus subset (means, CIs where bootstrapped, ceiling band)."""
    cols = min(3, len(subsets))
    rows = -(-len(subsets) // cols)
    order = _order(prediction["all"])
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 0.3 * len(order) * rows + 2 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), subsets):
        _bars(ax, prediction[name], order, dots=False)
        ax.set_title(f"{name} ({prediction[name].n_stimuli} stimuli)", fontsize=9)
    for ax in axes.ravel()[len(subsets) :]:
        ax.axis("off")
    fig.tight_layout()
    return _save(fig, path)


def kappa_heatmap(kappa: list, names: list[str], path: str | Path, title: str) -> Path:
    """All-pairs kappa matrix; the diagonal (self-agreement) is blanked so the colour scale shows the pairs."""
    k = np.array(kappa, dtype=float)
    np.fill_diagonal(k, np.nan)
    finite = k[np.isfinite(k)]
    size = max(5.0, 0.18 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(
        k, cmap="viridis", vmin=finite.min() if finite.size else 0, vmax=finite.max() if finite.size else 1
    )
    ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set_yticks(range(len(names)), names, fontsize=6)
    fig.colorbar(image, ax=ax, label="kappa")
    ax.set_title(title)
    return _save(fig, path)


def cobs_vs_cexp(block: ConsistencyBlock, is_human: np.ndarray, path: str | Path, title: str) -> Path:
    """c_obs against c_exp for every pair, with the analytic bounds and the null band of independent observers."""
    whole = block.whole
    c_obs, c_exp = np.asarray(whole.c_obs, float), np.asarray(whole.c_exp, float)
    iu = np.triu_indices(len(c_obs), k=1)
    pair_human = is_human[iu[0]] & is_human[iu[1]]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    e = np.linspace(0, 1, 401)
    k_low, k_high = kappa_bounds(e)
    ax.plot(e, e + k_low * (1 - e), color="0.4", lw=1, label="bounds")
    ax.plot(e, e + k_high * (1 - e), color="0.4", lw=1)
    ax.plot([0, 1], [0, 1], color="0.6", ls=":", lw=1)
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
        label=f"null band (independent, n={block.n_trials})",
    )
    ax.scatter(c_exp[iu][pair_human], c_obs[iu][pair_human], s=8, label="human-human")
    ax.scatter(c_exp[iu][~pair_human], c_obs[iu][~pair_human], s=8, label="pairs with a model")
    ax.set_xlabel("c_exp")
    ax.set_ylabel("c_obs")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title(title)
    return _save(fig, path)


def _finite_mean(values: list[float]) -> float:
    """The mean of the defined kappas (a pair whose kappa is 0/0 is NaN); NaN, not a warning, when none is."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def kappa_vs_accuracy(block: ConsistencyBlock, is_human: np.ndarray, path: str | Path, title: str) -> Path:
    """Each decision maker's accuracy against its mean kappa with the human participants."""
    k = np.asarray(block.whole.kappa, float)
    accuracy = np.asarray(block.whole.accuracy, float)
    humans = np.flatnonzero(is_human)
    mean_k = np.array([_finite_mean([k[d, h] for h in humans if h != d]) for d in range(len(k))])
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.scatter(accuracy[is_human], mean_k[is_human], s=12, label="participants")
    ax.scatter(accuracy[~is_human], mean_k[~is_human], s=20, marker="s", label="models")
    for d in np.flatnonzero(~is_human):
        ax.annotate(block.names[d], (accuracy[d], mean_k[d]), fontsize=6)
    ax.axhline(0, color="0.6", lw=1, ls=":")
    ax.set_xlabel("accuracy")
    ax.set_ylabel("mean kappa with participants")
    ax.legend(fontsize=7)
    ax.set_title(title)
    return _save(fig, path)


def power_plot(
    n_participants: list[int], power: list[float], se: list[float], target: float, path: str | Path, title: str
) -> Path:
    """Estimated power (with Monte Carlo SE) against the number of participants."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.errorbar(n_participants, power, yerr=se, marker="o", capsize=3)
    ax.axhline(target, color="0.5", ls="--", lw=1, label=f"target power {target:g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("participants")
    ax.set_ylabel("power")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
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
    return made
