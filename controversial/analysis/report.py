"""``report.md`` and ``results.json`` from the results of ``pipeline.py`` (the dataclasses of ``results.py``).

The markdown holds the tables a reader needs to answer "which model is best, and is it real?";
the JSON holds every number (NaN written as null), both written atomically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from controversial.analysis.benchmark.report import benchmark_section
from controversial.analysis.bootstrap import LOWER, UPPER
from controversial.analysis.jsonable import to_json
from controversial.analysis.results import (
    AnalysisResults,
    BootstrapResult,
    CategoricalConsistency,
    ConsistencyBlock,
    GroupMean,
    Inputs,
    PredictionResults,
    RatingsConsistency,
    ReliabilityResult,
    SubsetResult,
)
from controversial.atomic import atomic_write_text


def write_results(path: str | Path, results: AnalysisResults) -> None:
    """Every number as JSON (NaN -> null), atomically."""
    atomic_write_text(path, json.dumps(to_json(results), indent=1, allow_nan=False) + "\n")


def write_analysis(
    results: AnalysisResults | PredictionResults,
    out_dir: str | Path,
    *,
    figures: bool = True,
    header: Sequence[str] = (),
    config: dict[str, Any] | None = None,
) -> AnalysisResults:
    """Figures (optional), ``results.json`` and ``report.md`` into ``out_dir`` as ``analyze.py`` writes them, for
    what ``analyze_study`` returned in a notebook (``config``: the options to record, e.g. ``options.model_dump()``)
    or a whole ``AnalysisResults``; returns the results with their figures."""
    from dataclasses import replace

    from controversial.analysis import figures as drawing  # matplotlib only when drawing

    if isinstance(results, PredictionResults):
        inputs = Inputs(simulated=False, config=config or {})
        results = AnalysisResults(
            study=results.study, ranking=results.ranking, prediction=results.prediction, inputs=inputs
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = replace(results, figures=drawing.draw_all(results, out) if figures else {})
    write_results(out / "results.json", results)
    write_report(out / "report.md", results, results.figures, list(header))
    return results


def _f(x: float | None, digits: int = 3) -> str:
    """A number as printed: n/a where undefined, never ``-0.000`` (a tiny negative rounds to an unsigned 0)."""
    if x is None or not math.isfinite(x):
        return "n/a"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


fmt = _f  # the same rule for the console summaries

# Below this many participants the participant bootstrap has few distinct resamples (C(2N-1, N): 10 for N = 3,
# 92,378 for N = 10) and percentile CIs run into the range's ends; the report says so.
MIN_BOOTSTRAP_PARTICIPANTS = 10


def few_participants_note(n_participants: int) -> str | None:
    """The warning for a participant bootstrap on too few people; None when there are enough."""
    if n_participants >= MIN_BOOTSTRAP_PARTICIPANTS:
        return None
    distinct = math.comb(2 * n_participants - 1, n_participants)
    return (
        f"**Only {n_participants} participants**: the participant bootstrap has {distinct} distinct resamples of "
        f"them, so its CIs and p-values are coarse and often reach the ends of the range (read them as a pilot's "
        f"check that the analysis runs, not as inference; at least {MIN_BOOTSTRAP_PARTICIPANTS} participants for "
        "intervals worth reading)."
    )


def _p(p: float | None, n_resamples: int) -> str:
    if p is None or not math.isfinite(p):
        return ""
    return f"<{1 / n_resamples:.0e}" if p == 0 else f"{p:.2g}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table; a ``|`` inside a cell (the subset ``pair a|b``) is escaped so it stays one cell."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [line(header), "|" + "---|" * len(header)] + [line(r) for r in rows]


def ranking_table(subset: SubsetResult) -> list[str]:
    """Models ranked by mean Pearson r on this subset, with its bootstrap CI, and both ceilings.

    Only Pearson r is resampled, so the rank measures (Spearman, Kendall), which would stand here without a CI,
    are left to ``rank_measures_table``."""
    pearson = subset.measures["pearson"].mean
    ranking = sorted(pearson, key=pearson.__getitem__, reverse=True)
    ceiling = subset.noise_ceiling["pearson"]
    boot = subset.bootstrap
    header = ["rank", "model", "mean Pearson r"] + ([f"{100 * boot.ci_level:g}% CI"] if boot else [])
    rows = []
    for i, model in enumerate(ranking, start=1):
        row = [str(i), model, _f(pearson[model])]
        if boot:
            row.append("[{}, {}]".format(*(_f(v) for v in boot.ci[model])))
        rows.append(row)
    for label, key, entity in (
        ("noise ceiling, lower (leave one out)", "lower", LOWER),
        ("noise ceiling, upper (best possible)", "upper", UPPER),
    ):
        row = ["", label, _f(getattr(ceiling, key))]
        if boot:
            row.append("[{}, {}]".format(*(_f(v) for v in boot.ci[entity])))
        rows.append(row)
    return _table(header, rows)


def rank_measures_table(subset: SubsetResult) -> list[str]:
    """Spearman and Kendall means beside Pearson, as a robustness check of the ranking (no CIs: the bootstrap
    resamples Pearson r only)."""
    measures = subset.measures
    others = [m for m in measures if m != "pearson"]
    if not others:
        return []
    pearson = measures["pearson"].mean
    ranking = sorted(pearson, key=pearson.__getitem__, reverse=True)
    rows = [[model] + [_f(measures[m].mean[model]) for m in ["pearson", *others]] for model in ranking]
    rows.append(["noise ceiling, lower"] + [_f(subset.noise_ceiling[m].lower) for m in ["pearson", *others]])
    return _table(["model", *(f"mean {m}" for m in ["pearson", *others])], rows) + [
        "",
        "Rank measures are shown without CIs (the bootstrap resamples Pearson r only): read them as a check that "
        "the ranking does not hinge on the measure, not as estimates to compare.",
    ]


def significance_table(boot: BootstrapResult) -> list[str]:
    """Every pair once, in ranking order, named: the difference in mean r with its CI next to its p-value."""
    tests = boot.pairwise
    names = tests.names
    sig, p = np.asarray(tests.significance), tests.p_corrected
    level = f"{100 * boot.ci_level:g}% CI"
    rows = []
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            verdict = {1: f"{a} higher", -1: f"{names[j]} higher", 0: "n.s."}[int(sig[i, j])]
            rows.append(
                [
                    a,
                    names[j],
                    _f(tests.difference[i][j]),
                    "[{}, {}]".format(_f(tests.difference_low[i][j]), _f(tests.difference_high[i][j])),
                    _p(p[i][j], boot.n_resamples),
                    verdict,
                ]
            )
    return _table(["model", "vs", "difference in mean r", level, "p (Holm-Sidak)", f"at alpha {tests.alpha}"], rows) + [
        "",
        f"Two-tailed bootstrap p-values, Holm-Sidak corrected over all {len(rows)} pairs; the difference is the "
        "first model's mean Pearson r minus the second's, with the percentile CI of its resampled values."
        + (
            " Against the lower noise ceiling that interval need not contain the difference of the point "
            "estimates: the resampled lower ceiling sits below its estimate (see its CI above)."
            if LOWER in names
            else ""
        ),
    ]


def _subset_note(subset: SubsetResult) -> str:
    """Why a subset is not scored, or who it leaves out (see the exclusions table)."""
    if subset.not_scored:
        return f"not scored: {subset.not_scored}"
    return "; ".join(f"left out {e['detail']} (constant ratings)" for e in subset.left_out)


def subset_table(prediction: dict[str, SubsetResult], ranking: list[str]) -> list[str]:
    rows = []
    for name, subset in prediction.items():
        if subset.not_scored:
            scores = ["-"] * (len(ranking) + 2)
        else:
            mean = subset.measures["pearson"].mean
            ceiling = subset.noise_ceiling["pearson"]
            scores = [_f(mean[m]) for m in ranking] + [_f(ceiling.lower), _f(ceiling.upper)]
        rows.append([name, str(subset.n_stimuli), str(subset.n_participants)] + scores + [_subset_note(subset)])
    header = ["subset", "stimuli", "participants"] + ranking + ["lower ceiling", "upper ceiling", "note"]
    return _table(header, rows)


def _group_table(group_means: dict[str, GroupMean]) -> list[str]:
    rows = [[k, _f(v.mean), _f(v.sem), f"[{_f(v.ci_low)}, {_f(v.ci_high)}]"] for k, v in group_means.items()]
    return _table(["group", "mean kappa", "SEM", "95% CI (SEM)"], rows)


def consistency_section(ec: RatingsConsistency | ConsistencyBlock, title: str) -> list[str]:
    lines = [f"## {title}", ""]
    parts: list[tuple[str, ConsistencyBlock | CategoricalConsistency]]
    if isinstance(ec, RatingsConsistency):
        lines += [
            f"Decisions: {ec.decision}, ties broken by rule `{ec.tie_rule}`; kappa at c_exp = 1: `{ec.c_exp_one}`.",
            "",
        ]
        parts = [
            (heading, block)
            for heading, block in (
                ("Natural images: correct vs incorrect against the true class", ec.natural),
                ("Controversial stimuli: Cohen's kappa over categorical decisions", ec.controversial),
            )
            if block
        ]
    else:
        parts = [("Trial-level choices", ec)]
    for heading, block in parts:
        lines += [f"### {heading} ({block.n_trials} trials, {len(block.names)} decision makers)", ""]
        for aggregate, label in ((block.whole, "whole dataset"), (block.per_condition, "per condition, then averaged")):
            lines += [f"Aggregation: {label}.", ""] + _group_table(aggregate.group_means) + [""]
    return lines


def write_report(path: str | Path, results: AnalysisResults, figures: dict[str, str], header: list[str]) -> None:
    """The markdown report: header lines (inputs, provenance), ranking, significance, subsets, error consistency."""
    lines = ["# Model comparison report", ""] + header + [""]
    if results.prediction is not None:
        lines += _prediction_sections(results)
    if results.reliability:
        lines += reliability_section(results.reliability)
    if results.error_consistency:
        lines += consistency_section(results.error_consistency, "Error consistency (from ratings)") + [""]
    if results.benchmark:
        lines += benchmark_section(results.benchmark)
    for dataset, block in (results.choices or {}).items():
        lines += consistency_section(block, f"Error consistency (trial-level choices): {dataset}") + [""]
    if figures:
        lines += ["## Figures", ""] + [f"![{k}]({v})" for k, v in figures.items()] + [""]
    atomic_write_text(path, "\n".join(lines))


def reliability_section(reliability: dict[str, ReliabilityResult]) -> list[str]:
    """Test-retest (repeated presentations) and split-half (Spearman-Brown) reliability, per replication."""
    lines = ["## Reliability of the human ratings", ""]
    rows = []
    for name, block in reliability.items():
        retest, half = block.test_retest, block.split_half
        rows.append(
            [
                name,
                "no repeated presentations"
                if retest is None
                else f"{_f(retest.median)} [{_f(retest.quartiles[0])}, {_f(retest.quartiles[1])}]; pooled "
                f"{_f(retest.pooled)} ({retest.n_participants} participants, {retest.n_repeated_images} images each)",
                f"{_f(half.mean)} [{_f(half.ci_low)}, {_f(half.ci_high)}] ({half.n_participants} participants, "
                f"{half.n_splits} splits)",
            ]
        )
    lines += _table(["replication", "test-retest r: median [quartiles]", "split-half r (Spearman-Brown)"], rows)
    for name, block in reliability.items():
        if block.test_retest is not None:
            each = ", ".join(f"{p} {_f(r, 2)}" for p, r in block.test_retest.per_participant.items())
            lines += ["", f"Test-retest r per participant ({name}): {each}."]
    return lines + [
        "",
        "Test-retest: per participant, Pearson r between the first and second presentation of the repeated images "
        "(all categories); per-participant values in `results.json`. Split-half: participants split at random "
        "into halves, r of the halves' mean ratings corrected by Spearman-Brown (2r / (1 + r)); mean and "
        "percentile interval over the splits.",
        "",
    ]


def _prediction_sections(results: AnalysisResults) -> list[str]:
    """Exclusions, ranking, significance and subsets: the answer to "which model predicts people best?"."""
    assert results.prediction is not None and results.ranking is not None and results.study is not None
    prediction = results.prediction
    ranking = results.ranking
    lines: list[str] = []
    exclusions = results.study.exclusions
    lines += ["## Exclusions", ""]
    if exclusions:
        lines += _table(
            ["what", "reason", "count", "detail"],
            [[e["what"], e["reason"], str(e["count"]), e["detail"] or ""] for e in exclusions],
        )
    else:
        lines.append("None: every rating was analysed.")
    lines += ["", "## Which model predicts people best? (all stimuli)", ""] + ranking_table(prediction["all"]) + [""]
    rank_measures = rank_measures_table(prediction["all"])
    if rank_measures:
        lines += ["### The same ranking under rank measures", ""] + rank_measures + [""]
    boot = prediction["all"].bootstrap
    if boot and (note := few_participants_note(prediction["all"].n_participants)):
        lines += [note, ""]
    if boot:
        copies = "include" if boot.lower_ceiling_includes_own_copies else "exclude"
        lines += [
            f"Bootstrap: {boot.n_resamples} resamples of participants and stimuli (stratified by condition, "
            f'{boot.strata} strata), seed {boot.seed}; percentile CIs. The lower ceiling\'s "others" {copies} '
            "copies of the predicted participant drawn into the same resample.",
            "",
            "## Is the difference real?",
            "",
        ]
        lines += significance_table(boot) + [""]
    for name in ("natural", "controversial"):
        if name in prediction and prediction[name].not_scored:
            lines += [f"## {name.capitalize()} stimuli only", "", f"Not scored: {prediction[name].not_scored}.", ""]
        elif name in prediction and prediction[name].bootstrap:
            lines += [f"## {name.capitalize()} stimuli only", ""] + ranking_table(prediction[name]) + [""]
    return lines + ["## All subsets (mean Pearson r)", ""] + subset_table(prediction, ranking) + [""]
