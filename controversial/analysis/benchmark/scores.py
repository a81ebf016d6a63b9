"""The model-vs-human benchmark's five numbers per decision maker (Geirhos 2021 thesis, Eqs. 1-3; Geirhos et al.,
NeurIPS 2021): OOD accuracy, accuracy difference A, observed consistency O, error consistency E, and shape bias
on cue-conflict, per dataset and averaged over datasets, with the human baseline and the overall ranking.

For a decision maker x (a model, or a human as the baseline), the partners are the dataset's humans other than
x. Per condition c (each observer's accuracy over its own trials of c; c_obs and kappa over the trials both saw)
the pair values are averaged over conditions, then over partners, then over datasets:
``A = mean_d mean_h mean_c (acc_c(h) - acc_c(x))^2``, ``O`` the same mean of c_obs, ``E`` of kappa. The ranking
is the mean of the ranks by A (ascending), O and E (descending) among the models (the thesis' Table 2 rule).

The benchmark leaves out conditions that are not out of distribution (e.g. 100% contrast) and those where
humans are below 20% correct (``BENCHMARK_EXCLUDED``, as listed by the benchmark's plotting code); they stay in
the accuracy-vs-condition figure and in the error-consistency matrices, never in these five numbers.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import rankdata

from controversial.analysis.benchmark.intervals import with_intervals
from controversial.analysis.benchmark.kappa_inference import KappaInference, infer_dataset
from controversial.analysis.benchmark.options import BenchmarkOptions
from controversial.analysis.benchmark.shape_bias import ShapeBias, shape_bias, shape_bias_of
from controversial.analysis.error_consistency import CExpOne, DecisionData, consistency, decisions_from_trials
from controversial.analysis.jsonable import Matrix
from controversial.errors import UserError
from controversial.records.choices import Trial

HUMANS = "humans (mean)"
HUMANS_POOLED = "humans (pooled)"  # shape bias of every human trial together (the benchmark's figure)


@dataclass(frozen=True)
class DatasetBenchmark:
    """One dataset's benchmark numbers, a value per decision maker (``names`` order); humans are compared with
    the other humans. ``kappa`` is the per-condition-averaged pair matrix over the included conditions."""

    dataset: str
    names: list[str]
    is_human: list[bool]
    n_trials: int
    conditions: list[str]  # every condition, in display order
    excluded_conditions: list[str]  # left out of the five numbers
    accuracy_by_condition: Matrix  # (decision makers, conditions), every condition
    ood_accuracy: list[float]
    accuracy_difference: list[float]
    observed_consistency: list[float]
    error_consistency: list[float]
    kappa: Matrix
    human_baseline: dict[str, float]  # metric -> mean over the humans' rows
    shape_bias: list[float] | None = None  # cue-conflict only
    # the pair matrices behind accuracy difference and observed consistency (``kappa`` is error consistency's),
    # which the observer bootstrap of the overall table resamples
    accuracy_difference_pairs: Matrix | None = None
    observed_consistency_pairs: Matrix | None = None


@dataclass(frozen=True)
class BenchmarkRow:
    """One decision maker over the datasets it appears in (``humans (mean)``: the human baseline)."""

    name: str
    datasets: int
    ood_accuracy: float
    accuracy_difference: float
    observed_consistency: float
    error_consistency: float
    shape_bias: float | None
    mean_rank: float | None  # None for the human baseline, and for a model ranked alone
    ci: dict[str, list[float]] | None = None  # metric -> [low, high] (overall table: human-observer bootstrap)


def condition_order(labels: Sequence[str]) -> list[str]:
    """Conditions in a readable order: by the numbers in each label where every label has one (``c05`` <
    ``c10`` < ``c100``, ``1-10-10`` < ``64-10-10``), else alphabetically."""
    unique = sorted(set(labels))
    numbers = [tuple(float(x) for x in re.findall(r"\d+(?:\.\d+)?", u)) for u in unique]
    if all(numbers):
        return [u for _, u in sorted(zip(numbers, unique))]
    return unique


def _quiet_nanmean(values: np.ndarray, axis: int) -> np.ndarray:
    """nanmean without numpy's warning for an all-NaN slice (a pair that shares no trial in some condition)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def per_condition(data: DecisionData, conditions: Sequence[str], c_exp_one: CExpOne):
    """(C, D) accuracies over each observer's own trials and (C, D, D) c_obs and kappa over shared trials."""
    accuracy, observed, kappa = [], [], []
    for condition in conditions:
        mask = data.conditions == condition
        sub = DecisionData(
            data.names,
            tuple(np.asarray(data.images)[mask]),
            data.conditions[mask],
            data.correct[:, mask],
            data.available[:, mask],
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            result = consistency(sub, "whole", c_exp_one)
        accuracy.append(result.accuracy)
        observed.append(result.c_obs)
        kappa.append(result.kappa)
    return np.array(accuracy, dtype=float), np.array(observed, dtype=float), np.array(kappa, dtype=float)


def _partner_mean(pair: np.ndarray, is_human: np.ndarray) -> np.ndarray:
    """Row x: the mean of ``pair[x, h]`` over the humans h other than x."""
    partners = np.tile(is_human, (len(is_human), 1))
    np.fill_diagonal(partners, False)
    values = np.where(partners, pair, np.nan)
    return _quiet_nanmean(values, axis=1)


def dataset_benchmark(
    dataset: str,
    data: DecisionData,
    is_human: Sequence[bool],
    excluded: Sequence[str] = (),
    c_exp_one: CExpOne = "nan",
    shape_bias: Mapping[str, float] | None = None,
) -> DatasetBenchmark:
    """The five numbers of one dataset; ``excluded`` conditions are left out of them (not of the figures).
    A dataset needs at least two humans, or the human baseline is undefined."""
    humans = np.asarray(is_human, bool)
    if humans.sum() < 2:
        raise UserError(
            f"dataset {dataset!r}: {int(humans.sum())} human observer(s) among {', '.join(data.names)}; the "
            "benchmark compares every decision maker with the dataset's humans and needs at least two "
            "(humans are the observers matching choices_humans)"
        )
    every = condition_order(data.conditions.tolist())
    dropped = [c for c in every if c in set(excluded)]
    kept = [c for c in every if c not in set(excluded)]
    if not kept:
        raise UserError(f"dataset {dataset!r}: exclude_conditions leaves no condition (it has {', '.join(every)})")
    accuracy_all, _, _ = per_condition(data, every, c_exp_one)
    accuracy, observed, kappa = per_condition(data, kept, c_exp_one)
    squared = (accuracy[:, :, None] - accuracy[:, None, :]) ** 2  # (C, D, D)
    a_pair, o_pair, e_pair = (_quiet_nanmean(v, axis=0) for v in (squared, observed, kappa))
    rows = {
        "ood_accuracy": _quiet_nanmean(accuracy, axis=0),
        "accuracy_difference": _partner_mean(a_pair, humans),
        "observed_consistency": _partner_mean(o_pair, humans),
        "error_consistency": _partner_mean(e_pair, humans),
    }
    baseline = {k: float(np.mean(v[humans])) for k, v in rows.items()}
    bias = None
    if shape_bias is not None:
        bias = [float(shape_bias.get(n, np.nan)) for n in data.names]
        baseline["shape_bias"] = float(np.nanmean(np.array(bias)[humans]))
    return DatasetBenchmark(
        dataset=dataset,
        names=list(data.names),
        is_human=humans.tolist(),
        n_trials=int(data.correct.shape[1]),
        conditions=every,
        excluded_conditions=dropped,
        accuracy_by_condition=accuracy_all.T.tolist(),
        ood_accuracy=rows["ood_accuracy"].tolist(),
        accuracy_difference=rows["accuracy_difference"].tolist(),
        observed_consistency=rows["observed_consistency"].tolist(),
        error_consistency=rows["error_consistency"].tolist(),
        kappa=e_pair.tolist(),
        human_baseline=baseline,
        shape_bias=bias,
        accuracy_difference_pairs=a_pair.tolist(),
        observed_consistency_pairs=o_pair.tolist(),
    )


METRICS = ("ood_accuracy", "accuracy_difference", "observed_consistency", "error_consistency")


def rank_models(rows: Sequence[BenchmarkRow]) -> list[BenchmarkRow]:
    """The models' mean rank across A (ascending), O and E (descending), ties sharing their mean rank; the
    human baseline keeps ``mean_rank`` None. Rows come back best first, the human baseline last."""
    models = [r for r in rows if r.name != HUMANS]
    others = [r for r in rows if r.name == HUMANS]
    if len(models) < 2:  # a rank among one says nothing
        return [replace(r, mean_rank=None) for r in models] + others
    a = rankdata([r.accuracy_difference for r in models])
    o = rankdata([-r.observed_consistency for r in models])
    e = rankdata([-r.error_consistency for r in models])
    ranked = [replace(r, mean_rank=float((a[i] + o[i] + e[i]) / 3)) for i, r in enumerate(models)]
    return sorted(ranked, key=lambda r: (r.mean_rank, r.name)) + others


def dataset_rows(block: DatasetBenchmark) -> list[BenchmarkRow]:
    """A row per model (ranked), then each human against the others, then the human baseline."""

    def row(i: int) -> BenchmarkRow:
        return BenchmarkRow(
            name=block.names[i],
            datasets=1,
            ood_accuracy=block.ood_accuracy[i],
            accuracy_difference=block.accuracy_difference[i],
            observed_consistency=block.observed_consistency[i],
            error_consistency=block.error_consistency[i],
            shape_bias=None if block.shape_bias is None else block.shape_bias[i],
            mean_rank=None,
        )

    models = rank_models([row(i) for i, h in enumerate(block.is_human) if not h])
    humans = [row(i) for i, h in enumerate(block.is_human) if h]
    return models + humans + [_baseline_row([block])]


def _baseline_row(blocks: Sequence[DatasetBenchmark]) -> BenchmarkRow:
    values = {k: float(np.mean([b.human_baseline[k] for b in blocks])) for k in METRICS}
    biases = [b.human_baseline["shape_bias"] for b in blocks if "shape_bias" in b.human_baseline]
    return _summary_row(HUMANS, len(blocks), values, biases)


def _summary_row(name: str, datasets: int, values: Mapping[str, float], biases: Sequence[float]) -> BenchmarkRow:
    """A row of means over datasets (``values``: metric -> mean), unranked."""
    return BenchmarkRow(
        name,
        datasets,
        values["ood_accuracy"],
        values["accuracy_difference"],
        values["observed_consistency"],
        values["error_consistency"],
        shape_bias=float(np.mean(biases)) if biases else None,
        mean_rank=None,
    )


def common_datasets(blocks: Sequence[DatasetBenchmark]) -> list[DatasetBenchmark]:
    """The datasets that hold every model: models and humans are compared over the same ones (a model averaged
    over 3 datasets against humans over 8 would mix dataset difficulty into the comparison)."""
    models = {n for b in blocks for n, h in zip(b.names, b.is_human) if not h}
    return [b for b in blocks if models <= {n for n, h in zip(b.names, b.is_human) if not h}]


def overall_rows(blocks: Sequence[DatasetBenchmark]) -> list[BenchmarkRow]:
    """Each model averaged over ``blocks`` (the common datasets: the count is in ``datasets``), ranked; the
    human baseline is the mean over the same datasets of each dataset's human baseline."""
    per_model: dict[str, list[tuple[DatasetBenchmark, int]]] = {}
    for block in blocks:
        for i, (name, human) in enumerate(zip(block.names, block.is_human)):
            if not human:
                per_model.setdefault(name, []).append((block, i))
    rows = []
    for name, entries in per_model.items():
        values = {k: float(np.mean([getattr(b, k)[i] for b, i in entries])) for k in METRICS}
        biases = [b.shape_bias[i] for b, i in entries if b.shape_bias is not None]
        rows.append(_summary_row(name, len(entries), values, biases))
    return rank_models(rows + [_baseline_row(blocks)])


@dataclass(frozen=True)
class BenchmarkResults:
    """The benchmark over every dataset of trial-level choices: per-dataset numbers and tables, the overall
    table, shape bias on the cue-conflict datasets, and the kappa CIs and paired tests."""

    humans: str  # the regex on ``subj`` that marks humans
    c_exp_one: str
    datasets: dict[str, DatasetBenchmark]
    tables: dict[str, list[BenchmarkRow]]  # dataset -> rows, and "overall"
    shape_bias: dict[str, dict[str, ShapeBias]]  # cue-conflict dataset -> decision maker, and HUMANS_POOLED
    kappa_tests: dict[str, KappaInference]  # datasets with at least one model; empty when not resampled
    skipped: dict[str, str]  # dataset -> why it is not in the benchmark
    overall_datasets: list[str] = field(default_factory=list)  # the datasets of the overall table
    overall_resamples: int = 0  # of the overall table's intervals (0: none)
    level: float = 0.95  # of every interval


OVERALL = "overall"


def run_benchmark(
    datasets: Mapping[str, Sequence[Trial]],
    humans: str,
    options: BenchmarkOptions,
    c_exp_one: CExpOne = "nan",
    seed: int = 0,
    level: float = 0.95,
) -> BenchmarkResults:
    """The benchmark on trials grouped by dataset; humans are the decision makers whose ``subj`` matches
    ``humans``. Shape bias for the datasets named in ``options.cue_conflict``."""
    pattern = re.compile(humans)
    blocks: dict[str, DatasetBenchmark] = {}
    biases: dict[str, dict[str, ShapeBias]] = {}
    tests: dict[str, KappaInference] = {}
    skipped: dict[str, str] = {}
    for name, trials in datasets.items():
        data = decisions_from_trials(trials)
        is_human = [bool(pattern.search(n)) for n in data.names]
        if sum(is_human) < 2:
            skipped[name] = f"{sum(is_human)} human observer(s) (subj matching {humans!r}); the benchmark needs two"
            continue
        bias = None
        if name in options.cue_conflict:
            biases[name] = shape_bias(trials)
            human_trials = [t for t in trials if pattern.search(t.subject)]
            bias = {k: v.shape_bias for k, v in biases[name].items()}
            biases[name][HUMANS_POOLED] = shape_bias_of(HUMANS_POOLED, human_trials)
        excluded = options.exclude_conditions.get(name, [])
        block = dataset_benchmark(name, data, is_human, excluded, c_exp_one, bias)
        blocks[name] = block
        if options.kappa_resamples:
            kept = [c for c in block.conditions if c not in block.excluded_conditions]
            test = infer_dataset(
                name,
                data,
                is_human,
                kept,
                options.kappa_resamples,
                seed,
                options.observers,
                level,
                options.alpha,
                c_exp_one,
            )
            if test is not None:
                tests[name] = test
    tables = {name: dataset_rows(block) for name, block in blocks.items()}
    common = common_datasets(list(blocks.values()))
    if common:
        rows = overall_rows(common)
        if options.overall_resamples:
            rows = with_intervals(rows, common, options.overall_resamples, seed, level, HUMANS)
        tables[OVERALL] = rows
    elif blocks:
        skipped[OVERALL] = "no dataset holds every model, so models cannot be compared on the same datasets"
    overall = [b.dataset for b in common]
    resamples = options.overall_resamples if common else 0
    return BenchmarkResults(humans, c_exp_one, blocks, tables, biases, tests, skipped, overall, resamples, level)
