"""The full analysis of one study as plain data: every number the report and results.json show.

``analyze_study`` answers "which model predicts people best, and is the difference real?" on the
whole stimulus set and on subsets; ``analyze_ratings_consistency`` and ``analyze_choices`` add
error consistency. Results are the frozen dataclasses of ``results.py``, so the report, the figures and
downstream notebooks read one typed structure.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import replace
from typing import Sequence

import numpy as np

from controversial.analysis.bootstrap import LOWER, Distributions, pairwise_tests, percentile_ci, pooled_bootstrap
from controversial.analysis.ceilings import noise_ceiling
from controversial.analysis.correlation import Measure, participant_model_correlations
from controversial.analysis.decisions import decide
from controversial.analysis.error_consistency import (
    DecisionData,
    bootstrap_kappa,
    categorical_kappa,
    consistency,
    group_mean_ci,
    null_band,
)
from controversial.analysis.options import AnalysisOptions
from controversial.analysis.results import (
    BootstrapResult,
    CategoricalConsistency,
    CeilingResult,
    ConsistencyAggregate,
    ConsistencyBlock,
    GroupMean,
    KappaAggregate,
    KappaCI,
    MeasureResult,
    NullBand,
    PairwiseResult,
    PredictionResults,
    RatingsConsistency,
    StudySummary,
    SubsetResult,
)
from controversial.analysis.study import NATURAL, Exclusion, Study
from controversial.errors import UserError
from controversial.records.csvfile import InputError

log = logging.getLogger(__name__)

MAIN_SUBSETS = ("all", "natural", "controversial")


def _matrix(x: np.ndarray) -> list:
    return np.where(np.isfinite(x), x, np.nan).tolist()


def _differences(dist: Distributions, names: Sequence[str], level: float) -> tuple[np.ndarray, ...]:
    """Row minus column mean r for every pair of ``names``, with the percentile CI of its resampled values, so a
    p-value is read next to the size of the difference it tests."""
    columns = [dist.names.index(n) for n in names]
    estimates = dist.estimates[columns]
    low, high = np.full((len(names),) * 2, np.nan), np.full((len(names),) * 2, np.nan)
    for i, a in enumerate(columns):
        for j, b in enumerate(columns):
            if i != j:
                low[i, j], high[i, j] = percentile_ci((dist.samples[:, a] - dist.samples[:, b])[:, None], level)[0]
    return estimates[:, None] - estimates[None, :], low, high


def _undefined_rule(subs: Sequence[Study], name: str) -> tuple[list[Study], list[Exclusion], str | None]:
    """The stated rule for correlations a subset leaves undefined (a constant pattern correlates with nothing).

    A participant whose ratings are the same for every (image, category) of the subset is left out of that
    subset only (recorded as an exclusion naming them and the N that remains), so no NaN reaches a mean, a rank
    or a CI. The subset is not scored at all, with the reason returned, when a model's probabilities are constant
    on it or fewer than two participants of a replication remain (a noise ceiling needs two).
    """
    constant_models = [m for i, m in enumerate(subs[0].models) if any(np.ptp(s.model[i]) == 0 for s in subs)]
    kept, exclusions = [], []
    for s in subs:
        flat = s.human.reshape(len(s.participants), -1)
        varying = np.ptp(flat, axis=1) > 0
        if not varying.all():
            dropped = [p for p, v in zip(s.participants, varying) if not v]
            exclusions.append(
                Exclusion(
                    f"participant (subset {name})",
                    "same rating for every (image, category) of the subset, so their correlations are undefined; "
                    "left out of this subset only",
                    len(dropped),
                    f"{', '.join(dropped)}; N = {int(varying.sum())} remain",
                )
            )
        kept.append(
            replace(s, participants=tuple(p for p, v in zip(s.participants, varying) if v), human=s.human[varying])
        )
    reason = None
    if constant_models:
        reason = (
            f"model(s) {', '.join(constant_models)} give the same probability to every (image, category) of this "
            "subset, so their correlations are undefined"
        )
    elif min(len(s.participants) for s in kept) < 2:
        reason = (
            f"{min(len(s.participants) for s in kept)} participant(s) with varying ratings remain "
            "(a noise ceiling needs two)"
        )
    return kept, exclusions, reason


def evaluate_subset(
    parts: Sequence[tuple[Study, np.ndarray]],
    measures: Sequence[Measure],
    n_resamples: int,
    options: AnalysisOptions,
    name: str = "all",
) -> SubsetResult:
    """Correlations, ceilings and (if ``n_resamples``) bootstrap inference on one stimulus subset.

    ``parts`` are (study, stimulus mask) pairs of independent replications (different participants and
    stimuli, e.g. the PNAS Experiment 2a and 2b): every participant is scored on their own replication's
    stimuli and the replications are pooled, each resampled on its own (participants, and stimuli stratified
    by condition within the replication; replication i uses seed + i), so a pooled resample is the
    participant-weighted mean of the replications' resamples. Undefined correlations follow ``_undefined_rule``.
    """
    subs, exclusions, not_scored = _undefined_rule([study.subset(mask) for study, mask in parts], name)
    n_stimuli = int(sum(mask.sum() for _, mask in parts))
    n_participants = sum(len(s.participants) for s in subs)
    left_out = [e.__dict__ for e in exclusions]
    if not_scored:
        log.warning("subset %s is not scored: %s", name, not_scored)
        return SubsetResult(n_stimuli, n_participants, {}, {}, left_out=left_out, not_scored=not_scored)
    models = parts[0][0].models
    correlations: dict[str, MeasureResult] = {}
    ceilings: dict[str, CeilingResult] = {}
    for measure in measures:
        r = np.concatenate([participant_model_correlations(s.human, s.model, measure) for s in subs])
        per_part = [noise_ceiling(s.human, measure) for s in subs]
        lower = np.concatenate([c.lower_per_participant for c in per_part])
        upper = np.concatenate([c.upper_per_participant for c in per_part])
        if not (np.isfinite(r).all() and np.isfinite(lower).all()):  # e.g. the others' mean pattern is constant
            reason = f"a {measure} correlation or lower ceiling is undefined after leaving out constant participants"
            log.warning("subset %s is not scored: %s", name, reason)
            return SubsetResult(n_stimuli, n_participants, {}, {}, left_out=left_out, not_scored=reason)
        correlations[measure] = MeasureResult(
            mean=dict(zip(models, r.mean(axis=0).tolist())),
            per_participant={m: r[:, i].tolist() for i, m in enumerate(models)},
        )
        ceilings[measure] = CeilingResult(
            lower=float(lower.mean()),
            upper=float(upper.mean()),
            lower_per_participant=lower.tolist(),
            upper_per_participant=upper.tolist(),
        )
    boot = None
    if n_resamples:
        dist = pooled_bootstrap(
            [(s.human, s.model, s.conditions) for s in subs],
            models,
            n_resamples,
            options.seed,
            options.bootstrap.chunk_size,
            options.bootstrap.include_copies,
            options.bootstrap.threads,
        )
        ci = percentile_ci(dist.samples, options.bootstrap.ci_level)
        ranked = sorted(models, key=lambda m: -dist.estimates[dist.names.index(m)])
        tests = pairwise_tests(dist, include=ranked + [LOWER], alpha=options.bootstrap.alpha)
        difference, low, high = _differences(dist, tests.names, options.bootstrap.ci_level)
        boot = BootstrapResult(
            measure="pearson",
            n_resamples=n_resamples,
            seed=options.seed,
            ci_level=options.bootstrap.ci_level,
            lower_ceiling_includes_own_copies=options.bootstrap.include_copies,
            strata=int(sum(len(set(s.conditions.tolist())) for s in subs)),
            replications=len(subs),
            estimate=dict(zip(dist.names, dist.estimates.tolist())),
            ci={name: ci[i].tolist() for i, name in enumerate(dist.names)},
            pairwise=PairwiseResult(
                names=list(tests.names),
                alpha=tests.alpha,
                correction="holm-sidak",
                p_two_tailed=_matrix(tests.p_two_tailed),
                p_corrected=_matrix(tests.p_corrected),
                significance=tests.significance.tolist(),
                difference=_matrix(difference),
                difference_low=_matrix(low),
                difference_high=_matrix(high),
            ),
        )
    return SubsetResult(
        n_stimuli=n_stimuli,
        n_participants=n_participants,
        measures=correlations,
        noise_ceiling=ceilings,
        bootstrap=boot,
        left_out=left_out,
    )


def analyze_study(study: Study | Sequence[Study], options: AnalysisOptions) -> PredictionResults:
    """Human-response prediction on all stimuli and every subset, with bootstrap inference; several
    studies are independent replications, pooled (see ``evaluate_subset``)."""
    studies = [study] if isinstance(study, Study) else list(study)
    if len({(s.models, s.categories) for s in studies}) > 1:
        raise UserError("replications to pool must have the same models and categories")
    subsets = [s.subsets() for s in studies]
    prediction = {}
    for name, mask in subsets[0].items():
        main = name in MAIN_SUBSETS
        measures: Sequence[Measure] = options.measures if main else ("pearson",)
        resamples = (
            options.bootstrap.n_resamples
            if name == "all"
            else options.bootstrap.subset_resamples
            if main
            else options.bootstrap.other_subset_resamples
        )
        parts = [(s, subs[name]) for s, subs in zip(studies, subsets) if name in subs]
        if len(parts) < len(studies):
            log.info("subset %s is not in every replication; left out", name)
            continue
        log.debug("subset %s: %d stimuli, %d resamples", name, mask.sum(), resamples)
        prediction[name] = evaluate_subset(parts, measures, resamples, options, name)
    if prediction["all"].not_scored:
        raise InputError(f"the study cannot be scored on all stimuli: {prediction['all'].not_scored}")
    means = prediction["all"].measures["pearson"].mean
    conditions = np.concatenate([s.conditions for s in studies])
    summary = StudySummary(
        participants=[p for s in studies for p in s.participants],
        models=list(studies[0].models),
        n_stimuli=sum(len(s.stimuli) for s in studies),
        categories=list(studies[0].categories),
        replications=len(studies),
        conditions={c: int(n) for c, n in zip(*np.unique(conditions, return_counts=True))},
        exclusions=[e.__dict__ for s in studies for e in s.exclusions]
        + [row for subset in prediction.values() for row in subset.left_out],
    )
    return PredictionResults(
        study=summary, ranking=sorted(means, key=means.__getitem__, reverse=True), prediction=prediction
    )


def _group_means(kappa: np.ndarray, is_human: np.ndarray, names: tuple[str, ...], level: float) -> dict[str, GroupMean]:
    """Human-human and model-model means over unordered pairs, each model's mean over humans, the mean
    over all model-human pairs, with SEM CIs (groups without a pair are left out)."""
    humans, models = np.flatnonzero(is_human), np.flatnonzero(~is_human)
    out = {}
    for label, members in (("human-human", humans), ("model-model", models)):
        if len(members) > 1:
            iu = np.triu_indices(len(members), k=1)
            out[label] = group_mean_ci(kappa[np.ix_(members, members)][iu], level)
    if len(humans) and len(models):
        out["model-human"] = group_mean_ci(kappa[np.ix_(models, humans)].ravel(), level)
        for d in models:
            out[f"{names[d]}-human"] = group_mean_ci(kappa[d, humans], level)
    return {k: GroupMean(*v) for k, v in out.items()}


def _consistency_block(
    data: DecisionData, is_human: np.ndarray, options: AnalysisOptions, c_exp_one: str | None = None
) -> ConsistencyBlock:
    aggregates = {}
    for aggregation in ("whole", "per_condition"):
        result = consistency(data, aggregation, options.c_exp_one)
        ci = None
        if aggregation == "whole" and options.ec_resamples:
            bounds = bootstrap_kappa(
                data, options.ec_resamples, options.seed, "whole", options.c_exp_one, options.bootstrap.ci_level
            )
            ci = KappaCI(low=_matrix(bounds[..., 0]), high=_matrix(bounds[..., 1]), n_resamples=options.ec_resamples)
        aggregates[aggregation] = ConsistencyAggregate(
            accuracy=result.accuracy.tolist(),
            c_obs=_matrix(result.c_obs),
            c_exp=_matrix(result.c_exp),
            kappa=_matrix(result.kappa),
            kappa_unbiased=_matrix(result.kappa_unbiased),
            n=_matrix(result.n),
            group_means=_group_means(result.kappa, is_human, data.names, options.bootstrap.ci_level),
            kappa_bootstrap_ci=ci,
        )
    n_trials = int(data.correct.shape[1])
    band = null_band(
        n_trials,
        options.error_consistency.null_band_grid,
        options.error_consistency.null_band_repeats,
        level=options.bootstrap.ci_level,
        seed=options.seed,
        c_exp_one=options.c_exp_one,
    )
    return ConsistencyBlock(
        names=list(data.names),
        is_human=is_human.tolist(),
        n_trials=n_trials,
        whole=aggregates["whole"],
        per_condition=aggregates["per_condition"],
        null_band=NullBand(
            bin_edges=band.bin_edges.tolist(),
            c_obs=_matrix(band.c_obs),
            kappa=_matrix(band.kappa),
            grid_size=options.error_consistency.null_band_grid,
            repeats=options.error_consistency.null_band_repeats,
        ),
        c_exp_one=c_exp_one,
    )


def analyze_ratings_consistency(study: Study, options: AnalysisOptions) -> RatingsConsistency:
    """Error consistency from graded ratings: arg-max decisions (stated tie rule) of participants and models.

    Natural images: correct/incorrect against the true class. Controversial stimuli: Cohen's kappa
    over the K-way decisions (K categories, 10 in the paper), pooled and per condition (model pair) then averaged.
    """
    names = tuple(study.participants) + tuple(study.models)
    is_human = np.array([True] * len(study.participants) + [False] * len(study.models))
    decisions = np.concatenate(
        [decide(study.human, options.tie_rule, options.seed), decide(study.model, options.tie_rule, options.seed + 1)]
    )
    conditions = study.conditions
    natural_block = controversial_block = None
    natural = np.array([s.true_class is not None for s in study.stimuli])
    if natural.any():
        truth = np.array([study.categories.index(s.true_class) for s in study.stimuli if s.true_class is not None])
        correct = decisions[:, natural] == truth
        data = DecisionData(
            names,
            tuple(s.image for s, n in zip(study.stimuli, natural) if n),
            conditions[natural],
            correct,
            np.ones(correct.shape, bool),
        )
        natural_block = _consistency_block(data, is_human, options)
    controversial = conditions != NATURAL
    if controversial.any():
        d = decisions[:, controversial]
        pooled = categorical_kappa(d)
        per = [categorical_kappa(d[:, conditions[controversial] == c]) for c in sorted(set(conditions[controversial]))]
        with warnings.catch_warnings():  # a pair undefined in every condition stays NaN, without numpy's warning
            warnings.simplefilter("ignore", RuntimeWarning)
            per_mean = np.nanmean(np.stack(per), axis=0) if len(per) else pooled
        controversial_block = CategoricalConsistency(
            names=list(names),
            n_trials=int(controversial.sum()),
            measure=f"Cohen's kappa over {len(study.categories)}-way decisions",
            whole=KappaAggregate(_matrix(pooled), _group_means(pooled, is_human, names, options.bootstrap.ci_level)),
            per_condition=KappaAggregate(
                _matrix(per_mean), _group_means(per_mean, is_human, names, options.bootstrap.ci_level)
            ),
        )
    return RatingsConsistency(
        tie_rule=options.tie_rule,
        c_exp_one=options.c_exp_one,
        decision="arg-max over categories",
        natural=natural_block,
        controversial=controversial_block,
    )


def analyze_choices(data: DecisionData, human_names: set[str], options: AnalysisOptions) -> ConsistencyBlock:
    """Error consistency of trial-level categorical choices (model-vs-human format)."""
    is_human = np.array([n in human_names for n in data.names])
    return _consistency_block(data, is_human, options, c_exp_one=options.c_exp_one)
