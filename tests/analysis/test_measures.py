"""Correlation measures, noise ceilings and arg-max decisions against direct computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from controversial.analysis.ceilings import noise_ceiling
from controversial.analysis.correlation import participant_model_correlations
from controversial.analysis.decisions import ABSTAIN, decide


@pytest.fixture()
def data():
    rng = np.random.default_rng(0)
    truth = rng.random((12, 4))
    human = np.round(np.clip(truth + 0.3 * rng.standard_normal((5, 12, 4)), 0, 1) * 4) / 4
    model = np.clip(truth + 0.2 * rng.standard_normal((3, 12, 4)), 0, 1)
    return human, model


@pytest.mark.parametrize(
    "measure, reference",
    [
        ("pearson", lambda x, y: stats.pearsonr(x, y).statistic),
        ("spearman", lambda x, y: stats.spearmanr(x, y).statistic),
        ("kendall", lambda x, y: stats.kendalltau(x, y, variant="b").statistic),
    ],
)
def test_measures_match_scipy(data, measure, reference):
    human, model = data
    r = participant_model_correlations(human, model, measure)
    expected = [[reference(h.ravel(), m.ravel()) for m in model] for h in human]
    np.testing.assert_allclose(r, expected, atol=1e-12)


def test_noise_ceilings(data):
    human, _ = data
    ceiling = noise_ceiling(human)
    for s in range(5):
        others = np.delete(human, s, axis=0).mean(axis=0)
        assert ceiling.lower_per_participant[s] == pytest.approx(
            stats.pearsonr(human[s].ravel(), others.ravel()).statistic
        )
    assert ceiling.lower == pytest.approx(ceiling.lower_per_participant.mean())
    # The upper bound is the best any single prediction can do: no random or data-derived pattern beats it.
    rng = np.random.default_rng(1)
    candidates = [human.mean(axis=0), human[0], *rng.random((50, 12, 4))]
    for c in candidates:
        assert participant_model_correlations(human, c[None]).mean() <= ceiling.upper + 1e-12
    assert ceiling.upper >= ceiling.lower
    assert np.isnan(noise_ceiling(human, "spearman").upper)
    with pytest.raises(ValueError, match="two participants"):
        noise_ceiling(human[:1])


def test_tie_rules():
    ratings = np.array([[0.0, 0.5, 0.5, 0.25], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(decide(ratings, "first"), [1, 0, 0])
    np.testing.assert_array_equal(decide(ratings, "abstain"), [ABSTAIN, 0, ABSTAIN])
    random = np.stack([decide(ratings, "random", seed=s) for s in range(200)])
    assert set(random[:, 0]) == {1, 2} and set(random[:, 1]) == {0} and set(random[:, 2]) == {0, 1, 2, 3}
    np.testing.assert_array_equal(decide(ratings, "random", seed=3), decide(ratings, "random", seed=3))
    with pytest.raises(ValueError, match="tie_rule"):
        decide(ratings, "last")
