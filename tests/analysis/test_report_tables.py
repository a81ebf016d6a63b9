"""The report's tables name the models they compare, give each p-value beside the difference it tests and its
CI, and print no measure without a CI in the ranking."""

from __future__ import annotations

import numpy as np

from controversial.analysis.pipeline import AnalysisOptions, analyze_study
from controversial.analysis.report import rank_measures_table, ranking_table, significance_table
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.analysis.study import build_study
from controversial.records.responses import read_human_ratings, read_model_responses


def test_pairwise_table_names_models_and_gives_the_difference_with_its_ci(tmp_path):
    models = simulate_models(n_models=3, stimuli_per_pair=10, natural_per_class=2, seed=1)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim2": 1.0}), 6, seed=2)
    study = build_study(
        *(f(p) for f, p in zip((read_human_ratings, read_model_responses), write_study(tmp_path, models, ratings)))
    )
    results = analyze_study(
        study,
        AnalysisOptions(
            bootstrap={"n_resamples": 400, "subset_resamples": 0, "other_subset_resamples": 0},
            error_consistency={"enabled": False},
        ),
    )
    boot = results.prediction["all"].bootstrap
    table = significance_table(boot)
    assert "c1" not in "\n".join(table)
    row = next(line for line in table if line.startswith("| sim2 | sim1 |"))
    i, j = boot.pairwise.names.index("sim2"), boot.pairwise.names.index("sim1")
    difference = (
        results.prediction["all"].measures["pearson"].mean["sim2"]
        - results.prediction["all"].measures["pearson"].mean["sim1"]
    )
    assert np.isclose(boot.pairwise.difference[i][j], difference)
    low, high = boot.pairwise.difference_low[i][j], boot.pairwise.difference_high[i][j]
    assert low < difference < high and f"| {difference:.3f} | [{low:.3f}, {high:.3f}] |" in row
    ranking = "\n".join(ranking_table(results.prediction["all"]))
    assert "spearman" not in ranking and "kendall" not in ranking
    assert "mean spearman" in "\n".join(rank_measures_table(results.prediction["all"]))
