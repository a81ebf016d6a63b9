"""The analysis results as frozen dataclasses: what ``pipeline.py`` computes and the report, figures and tasks read.

A renamed field is then an error where it is read (and to a type checker), not a missing key at run time in
another file. ``jsonable.to_json`` turns them into the JSON-ready structure of ``results.json``:
fields in declaration order, NaN as null, optional blocks left out when absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controversial.analysis.benchmark.scores import BenchmarkResults
from controversial.analysis.jsonable import Matrix
from controversial.analysis.jsonable import optional as _optional


@dataclass(frozen=True)
class MeasureResult:
    """One correlation measure on one subset: each model's mean over participants, and the per-participant values."""

    mean: dict[str, float]
    per_participant: dict[str, list[float]]


@dataclass(frozen=True)
class CeilingResult:
    lower: float
    upper: float
    lower_per_participant: list[float]
    upper_per_participant: list[float]


@dataclass(frozen=True)
class PairwiseResult:
    """Holm-Sidak corrected pairwise bootstrap tests; ``significance[i][j]`` is 1 if row i is above column j."""

    names: list[str]
    alpha: float  # family-wise significance level
    correction: str
    p_two_tailed: Matrix
    p_corrected: Matrix
    significance: list[list[int]]
    difference: Matrix  # row's mean r minus column's
    difference_low: Matrix  # percentile CI of the resampled difference, at the bootstrap's ci_level
    difference_high: Matrix


@dataclass(frozen=True)
class BootstrapResult:
    measure: str
    n_resamples: int
    seed: int
    ci_level: float
    lower_ceiling_includes_own_copies: bool
    strata: int
    replications: int  # independent replications pooled (strata counts each replication's conditions)
    estimate: dict[str, float]
    ci: dict[str, list[float]]  # name -> [low, high]; names include the ceilings
    pairwise: PairwiseResult


@dataclass(frozen=True)
class SubsetResult:
    """Correlations, noise ceilings and (where resampled) bootstrap inference on one stimulus subset.

    ``left_out``: participants whose correlations the subset leaves undefined (constant ratings on it), as
    exclusions; ``not_scored``: why the subset has no scores at all (then ``measures`` and ``noise_ceiling`` are
    empty), so a reader shows the reason instead of a blank.
    """

    n_stimuli: int
    n_participants: int  # those scored on this subset, after ``left_out``
    measures: dict[str, MeasureResult]
    noise_ceiling: dict[str, CeilingResult]
    bootstrap: BootstrapResult | None = _optional()
    left_out: list[dict[str, Any]] = field(default_factory=list)  # rows of the exclusions table
    not_scored: str | None = _optional()


@dataclass(frozen=True)
class StudySummary:
    participants: list[str]
    models: list[str]
    n_stimuli: int
    categories: list[str]
    replications: int
    conditions: dict[str, int]
    exclusions: list[dict[str, Any]]


@dataclass(frozen=True)
class PredictionResults:
    """Human-response prediction: the study, models ranked by mean Pearson r on all stimuli, every subset."""

    study: StudySummary
    ranking: list[str]
    prediction: dict[str, SubsetResult]


@dataclass(frozen=True)
class GroupMean:
    mean: float
    sem: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class KappaCI:
    low: Matrix
    high: Matrix
    n_resamples: int


@dataclass(frozen=True)
class ConsistencyAggregate:
    """Error consistency of every pair of decision makers, aggregated over the whole set or per condition."""

    accuracy: list[float]
    c_obs: Matrix
    c_exp: Matrix
    kappa: Matrix
    kappa_unbiased: Matrix
    n: Matrix
    group_means: dict[str, GroupMean]
    kappa_bootstrap_ci: KappaCI | None = _optional()


@dataclass(frozen=True)
class NullBand:
    bin_edges: list[float]
    c_obs: Matrix
    kappa: Matrix
    grid_size: int
    repeats: int


@dataclass(frozen=True)
class ConsistencyBlock:
    """Correct/incorrect error consistency of humans and models on one set of trials."""

    names: list[str]
    is_human: list[bool]
    n_trials: int
    whole: ConsistencyAggregate
    per_condition: ConsistencyAggregate
    null_band: NullBand
    c_exp_one: str | None = _optional()  # stated on trial-level choices; ratings state it one level up
    files: list[str] | None = _optional()  # trial-level choices: the CSV files the block was read from


@dataclass(frozen=True)
class KappaAggregate:
    kappa: Matrix
    group_means: dict[str, GroupMean]


@dataclass(frozen=True)
class CategoricalConsistency:
    """Cohen's kappa over categorical decisions on controversial stimuli (no true class to be wrong against)."""

    names: list[str]
    n_trials: int
    measure: str
    whole: KappaAggregate
    per_condition: KappaAggregate


@dataclass(frozen=True)
class RatingsConsistency:
    """Error consistency from arg-max decisions on graded ratings."""

    tie_rule: str
    c_exp_one: str
    decision: str
    natural: ConsistencyBlock | None = _optional()
    controversial: CategoricalConsistency | None = _optional()


@dataclass(frozen=True)
class TestRetestResult:
    """Per participant, r between first and second presentations of the repeated images (all categories)."""

    __test__ = False  # not a pytest class, despite its name

    n_participants: int  # analysed participants who saw repeats
    n_repeated_images: int  # per participant (the median)
    per_participant: dict[str, float]
    median: float
    quartiles: list[float]  # 25th and 75th percentiles over participants
    pooled: float  # r over every participant's pairs together


@dataclass(frozen=True)
class SplitHalfResult:
    """Spearman-Brown corrected split-half r of the participants' mean ratings, over random splits."""

    n_participants: int
    n_splits: int
    mean: float
    ci_low: float  # percentile interval over the splits
    ci_high: float
    ci_level: float


@dataclass(frozen=True)
class ReliabilityResult:
    test_retest: TestRetestResult | None  # None: no image was presented twice
    split_half: SplitHalfResult


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """What was analysed: the ratings and model responses (a path, a list of paths, or a replication -> path(s)
    mapping) with the replications read from them, or, for a run on trial-level choices alone, the choices."""

    human_ratings: str | list[str] | dict[str, Any] | None = _optional()
    model_responses: str | list[str] | dict[str, Any] | None = _optional()
    replications: list[str] | None = _optional()
    choices: str | list[str] | None = _optional()
    simulated: bool
    config: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class AnalysisResults:
    """Everything one ``python analyze.py`` run found; ``results.json`` is ``to_json`` of it.

    ``study``, ``ranking`` and ``prediction`` are None for a run on trial-level choices alone; ``choices`` is
    keyed by dataset (one folder of trial CSVs each).
    """

    study: StudySummary | None = _optional()
    ranking: list[str] | None = _optional()
    prediction: dict[str, SubsetResult] | None = _optional()
    inputs: Inputs
    error_consistency: RatingsConsistency | None = _optional()
    choices: dict[str, ConsistencyBlock] | None = _optional()
    benchmark: BenchmarkResults | None = _optional()  # the model-vs-human benchmark on the choices
    reliability: dict[str, ReliabilityResult] | None = _optional()  # of the human ratings, per replication
    figures: dict[str, str] = field(default_factory=dict)
