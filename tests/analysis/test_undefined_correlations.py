"""A correlation a subset leaves undefined (a participant's flat ratings there) follows a stated rule: the
participant is left out of that subset and named in the exclusions; no NaN reaches a mean, a rank or a CI; a
subset that cannot be scored says why, in the report and in its figure panel."""

from __future__ import annotations

import math

import numpy as np

from controversial.analysis.figures import subset_comparison
from controversial.analysis.pipeline import AnalysisOptions, analyze_study
from controversial.analysis.report import subset_table
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.analysis.study import build_study
from controversial.records.responses import read_human_ratings, read_model_responses

FAST = AnalysisOptions(
    bootstrap={"n_resamples": 300, "subset_resamples": 200, "other_subset_resamples": 0},
    error_consistency={"enabled": False},
    measures=["pearson", "spearman"],
)


def _study(tmp_path, n_participants: int, flat: dict[int, str]):
    """A simulated study where participant p rates 0 on every stimulus of subset ``flat[p]``."""
    models = simulate_models(n_models=3, stimuli_per_pair=10, natural_per_class=2, seed=1)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim2": 1.0}), n_participants, seed=2)
    for p, which in flat.items():
        if which == "controversial":
            mask = np.array([s.targeted_models is not None for s in models.stimuli])
        else:  # a pair "simA|simB"
            mask = np.array(
                [s.targeted_models is not None and "|".join(sorted(s.targeted_models)) == which for s in models.stimuli]
            )
        ratings[p, mask] = 0.0
    human, model = write_study(tmp_path, models, ratings, seed=3)
    return build_study(read_human_ratings(human), read_model_responses(model))


def _finite(values) -> bool:
    return all(math.isfinite(v) for v in values)


def test_a_flat_participant_is_left_out_of_that_subset_only_and_named(tmp_path):
    study = _study(tmp_path, 6, {0: "controversial"})
    results = analyze_study(study, FAST)
    subset = results.prediction["controversial"]
    assert subset.not_scored is None and subset.n_participants == 5
    for measure in subset.measures.values():
        assert _finite(measure.mean.values())
    assert _finite(v for bounds in subset.bootstrap.ci.values() for v in bounds)
    assert _finite(subset.bootstrap.estimate.values())
    assert results.prediction["all"].n_participants == 6  # the rule is per subset
    rows = [e for e in results.study.exclusions if e["what"] == "participant (subset controversial)"]
    assert len(rows) == 1 and rows[0]["count"] == 1
    assert "sim_participant_01" in rows[0]["detail"] and "N = 5 remain" in rows[0]["detail"]
    assert "n/a" not in "\n".join(subset_table(results.prediction, results.ranking))


def test_a_subset_that_cannot_be_scored_says_why_in_the_report_and_the_figure(tmp_path):
    study = _study(tmp_path, 2, {0: "sim1|sim2"})
    results = analyze_study(study, FAST)
    subset = results.prediction["pair sim1|sim2"]
    assert subset.not_scored is not None and "noise ceiling needs two" in subset.not_scored
    table = "\n".join(subset_table(results.prediction, results.ranking))
    assert "not scored: 1 participant(s) with varying ratings remain" in table
    assert "| pair sim1\\|sim2 |" in table  # the subset's "|" escaped, so the markdown row keeps its columns
    path = subset_comparison(results.prediction, tmp_path / "subsets.png", ["pair sim1|sim2", "natural"])
    assert path.stat().st_size > 0
