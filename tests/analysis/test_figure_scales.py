"""Error-consistency and subset figures read the same in every run (issue 60, item 9): kappa on a diverging map
centred at 0 over its fixed range with n/a in the legend; every subset panel keeps its x tick labels and, by
default, its bootstrap CI."""

from __future__ import annotations

import numpy as np
import pytest

from controversial.analysis import figures
from controversial.analysis.options import AnalysisOptions
from controversial.analysis.pipeline import analyze_study
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.analysis.study import build_study
from controversial.records.responses import read_human_ratings, read_model_responses


@pytest.fixture
def drawn(monkeypatch):
    """The figures as drawn, before they are saved and closed."""
    kept = []

    def keep(fig, path):
        fig.canvas.draw()
        kept.append(fig)
        return path

    monkeypatch.setattr(figures, "_save", keep)
    return kept


def test_kappa_heatmap_is_diverging_at_zero_with_a_fixed_range_and_na_in_the_legend(tmp_path, drawn):
    kappa = np.full((3, 3), -0.03)
    kappa[0, 2] = kappa[2, 0] = np.nan
    figures.kappa_heatmap(kappa.tolist(), ["a", "b", "c"], tmp_path / "k.png", "kappa")
    (ax, _colorbar) = drawn[0].axes
    image = ax.images[0]
    assert image.get_clim() == (-1, 1) and image.get_cmap().name.startswith(figures.KAPPA_CMAP)
    white = image.get_cmap()(0.5)  # kappa 0 sits at the map's neutral centre
    assert min(white[:3]) > 0.9
    assert any(t.get_text().startswith("n/a") for t in ax.get_legend().get_texts())


def test_every_subset_panel_has_tick_labels_and_a_ci_by_default(tmp_path, drawn):
    models = simulate_models(3, "MNIST", 4, 1, seed=0)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim1": 1.0}), 5, seed=1)
    human, model = write_study(tmp_path, models, ratings)
    study = build_study(read_human_ratings(human), read_model_responses(model))
    assert AnalysisOptions().bootstrap.other_subset_resamples > 0  # the panels' subsets are resampled by default
    bootstrap = {"n_resamples": 40, "subset_resamples": 40, "other_subset_resamples": 40}
    options = AnalysisOptions(bootstrap=bootstrap, error_consistency={"enabled": False})
    prediction = analyze_study(study, options).prediction
    subsets = [s for s in prediction if s in ("natural", "controversial") or s.startswith("targets ")]
    assert len(subsets) % 3 != 0  # a panel sits above an empty slot
    assert all(prediction[s].bootstrap is not None for s in subsets)
    figures.subset_comparison(prediction, tmp_path / "s.png", subsets)
    for ax in [ax for ax in drawn[0].axes if ax.axison]:
        assert any(t.get_visible() and t.get_text() for t in ax.get_xticklabels()), ax.get_title()
        assert "no CI" not in ax.get_title()
