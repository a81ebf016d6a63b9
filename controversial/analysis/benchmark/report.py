"""The model-vs-human benchmark's section of ``report.md``: the overall table, one table per dataset (a row per
decision maker, three decimals), shape bias per category, and the kappa CIs and paired tests."""

from __future__ import annotations

import math

from controversial.analysis.benchmark.kappa_inference import KappaInference
from controversial.analysis.benchmark.scores import HUMANS, HUMANS_POOLED, OVERALL, BenchmarkResults, BenchmarkRow


def _f(x: float | None) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _p(p: float, n_resamples: int | None) -> str:
    """A p-value; a bootstrap one (``n_resamples`` given) at its floor 2/(B+1) is shown as a bound."""
    if not math.isfinite(p):
        return "n/a"
    if n_resamples is not None and p <= 2 / (n_resamples + 1):
        return f"<={2 / (n_resamples + 1):.1g}"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _with_ci(row: BenchmarkRow, metric: str) -> str:
    """A value, and its interval where the row has one (the overall table)."""
    value = _f(getattr(row, metric))
    if row.ci is None or metric not in row.ci:
        return value
    low, high = row.ci[metric]
    return f"{value} [{_f(low)}, {_f(high)}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def rows_table(rows: list[BenchmarkRow], overall: bool) -> list[str]:
    """A row per decision maker: mean rank, the four numbers, shape bias where any row has one."""
    bias = any(r.shape_bias is not None for r in rows)
    header = ["mean rank", "decision maker"] + (["datasets"] if overall else [])
    header += ["OOD accuracy", "accuracy difference", "observed consistency", "error consistency"]
    header += ["shape bias"] if bias else []
    body = []
    for r in rows:
        name = f"**{r.name}**" if r.name == HUMANS else r.name
        line = ["" if r.mean_rank is None else f"{r.mean_rank:.2f}", name] + ([str(r.datasets)] if overall else [])
        line += [_with_ci(r, m) for m in ("ood_accuracy", "accuracy_difference", "observed_consistency")]
        line += [_with_ci(r, "error_consistency")]
        line += [_f(r.shape_bias)] if bias else []
        body.append(line)
    return _table(header, body)


def kappa_tests_table(test: KappaInference) -> list[str]:
    """Each model's mean kappa with the humans and its CI, then every pair with its paired test."""
    level = f"{100 * test.level:g}%"
    lines = _table(
        ["model", "mean kappa with humans", f"{level} CI"],
        [
            [m, _f(e), f"[{_f(lo)}, {_f(hi)}]"]
            for m, e, lo, hi in zip(test.models, test.estimate, test.ci_low, test.ci_high)
        ],
    )
    if test.pairs:
        floor = test.n_resamples if test.observers == "fixed" else None  # percentile p-values have a floor
        lines += [""] + _table(
            ["model a", "model b", "E(a) - E(b)", f"{level} CI", "p", "p (Holm)", f"different at {test.alpha:g}"],
            [
                [
                    t.a,
                    t.b,
                    _f(t.difference),
                    f"[{_f(t.ci_low)}, {_f(t.ci_high)}]",
                    _p(t.p_value, floor),
                    _p(t.p_holm, floor),
                    "**yes**" if t.significant else "no",
                ]
                for t in test.pairs
            ],
        )
    return lines


def benchmark_section(results: BenchmarkResults) -> list[str]:
    """The markdown of the benchmark: how it was computed, then the tables."""
    lines = [
        "## Model-vs-human benchmark",
        "",
        "Geirhos 2021 thesis, Eqs. 1-3: per condition, each decision maker against each human of the dataset "
        "(humans: against the *other* humans), averaged over conditions, then humans, then datasets. Accuracy "
        "difference is squared (lower is more human-like); OOD accuracy is the mean over conditions; mean rank "
        "ranks the models by accuracy difference (ascending), observed and error consistency (descending). "
        f"Humans: `subj` matching `{results.humans}`; kappa at c_exp = 1: `{results.c_exp_one}`; "
        "shape bias = shape / (shape + texture) decisions on cue-conflict trials whose two classes differ.",
        "",
    ]
    lines += [f"Not in the benchmark: {name}: {why}." for name, why in results.skipped.items()]
    if OVERALL in results.tables:
        names = results.overall_datasets
        rows = results.tables[OVERALL]
        lines += ["", f"### Over the {len(names)} dataset(s) that hold every model: {', '.join(names)}", ""]
        lines += [
            "Models and the human baseline are averaged over the same datasets"
            + (
                f"; [brackets]: {100 * results.level:g}% percentile intervals from resampling each dataset's "
                f"humans ({results.overall_resamples} resamples; a model's OOD accuracy involves no human)."
                if any(r.ci for r in rows)
                else "."
            ),
            "",
        ]
        lines += rows_table(rows, overall=True)
    lines.append("")
    for name, block in results.datasets.items():
        lines += [f"### {name} ({block.n_trials} trials, conditions {', '.join(block.conditions)})", ""]
        if block.excluded_conditions:
            lines += [f"Left out of the numbers (the benchmark's rule): {', '.join(block.excluded_conditions)}.", ""]
        lines += rows_table(results.tables[name], overall=False) + [""]
        if name in results.shape_bias:
            bias = results.shape_bias[name]
            shown = [HUMANS_POOLED] + [n for n, h in zip(block.names, block.is_human) if not h]
            categories = sorted({c for v in bias.values() for c in v.per_category})
            lines += ["Shape bias per shape category:", ""]
            lines += _table(
                ["category"] + shown,
                [[c] + [_f(bias[n].per_category.get(c)) for n in shown] for c in categories],
            ) + [""]
        if name in results.kappa_tests:
            test = results.kappa_tests[name]
            how = (
                "percentile CIs and p (about these humans)"
                if test.observers == "fixed"
                else "normal-theory CIs and p with the between-human spread added (humans as a sample of people)"
            )
            lines += (
                [
                    f"Is a difference in error consistency real? {test.n_resamples} bootstrap resamples of trials "
                    f"within conditions (Klein et al. 2025), paired across models; {how}; Holm over the pairs.",
                    "",
                ]
                + kappa_tests_table(test)
                + [""]
            )
    return lines


def console_table(rows: list[BenchmarkRow]) -> list[str]:
    """The overall table as plain text for the terminal."""
    head = f"{'rank':>5}  {'decision maker':<24} {'OOD acc':>7} {'acc diff':>8} {'obs cons':>8} {'err cons':>8}"
    lines = ["model-vs-human benchmark, over the datasets that hold every model:", head]
    for r in rows:
        rank = "" if r.mean_rank is None else f"{r.mean_rank:.2f}"
        lines.append(
            f"{rank:>5}  {r.name:<24} {_f(r.ood_accuracy):>7} {_f(r.accuracy_difference):>8} "
            f"{_f(r.observed_consistency):>8} {_f(r.error_consistency):>8}"
        )
    return lines
