"""Every figure is drawn in one style with a vector copy beside its PNG."""

from __future__ import annotations

from controversial.analysis.figures import draw_all
from controversial.analysis.pipeline import AnalysisOptions, analyze_ratings_consistency, analyze_study
from controversial.analysis.results import AnalysisResults, Inputs
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.analysis.study import build_study
from controversial.records.responses import read_human_ratings, read_model_responses


def test_every_figure_has_a_pdf_beside_its_png(tmp_path):
    models = simulate_models(n_models=3, stimuli_per_pair=10, natural_per_class=2, seed=1)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim2": 1.0}), 5, seed=2)
    human, model = write_study(tmp_path, models, ratings)
    study = build_study(read_human_ratings(human), read_model_responses(model))
    options = AnalysisOptions(
        bootstrap={"n_resamples": 200, "subset_resamples": 100, "other_subset_resamples": 50},
        error_consistency={"n_resamples": 20, "null_band_grid": 10},
    )
    prediction = analyze_study(study, options)
    results = AnalysisResults(
        study=prediction.study,
        ranking=prediction.ranking,
        prediction=prediction.prediction,
        inputs=Inputs(simulated=True, config={}),
        error_consistency=analyze_ratings_consistency(study, options),
    )
    made = draw_all(results, tmp_path / "figures")
    assert len(made) >= 6
    for relative in made.values():
        png = tmp_path / "figures" / relative
        assert png.suffix == ".png" and png.stat().st_size > 0
        assert png.with_suffix(".pdf").read_bytes().startswith(b"%PDF")
