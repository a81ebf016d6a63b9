import math

import pytest
import torch

from controversial.zoo.archs.kde import GaussianKDE
from controversial.zoo.train_options import TrainOptions
from controversial.zoo.training_methods import select_kde_bandwidth


def _direct_log_likelihood(x: torch.Tensor, points: torch.Tensor, sigma: float) -> float:
    """log( (1/N) sum_i N(x; x_i, sigma^2 I) ), term by term in float64."""
    x, points = x.double().flatten(), points.double().flatten(1)
    d = x.numel()
    densities = [math.exp(-((x - p) ** 2).sum().item() / (2 * sigma**2)) for p in points]
    return math.log(sum(densities) / len(points)) - 0.5 * d * math.log(2 * math.pi * sigma**2)


def test_log_likelihood_matches_direct_computation():
    generator = torch.Generator().manual_seed(0)
    train = torch.rand(30, 1, 4, 4, generator=generator)
    labels = torch.arange(30) % 10
    kde = GaussianKDE(train, labels, sigma=0.4, chunk_size=2)  # tiny chunks exercise the chunked logsumexp
    queries = torch.rand(3, 1, 4, 4, generator=generator)
    logits = kde(queries)
    for q in range(3):
        for c in range(10):
            expected = _direct_log_likelihood(queries[q], train[labels == c], 0.4)
            assert logits[q, c].item() == pytest.approx(expected, abs=1e-3)


def test_nearest_class_wins_and_gradient_reaches_the_image():
    train = torch.zeros(10, 1, 2, 2)
    for c in range(10):
        train[c] = c / 10
    kde = GaussianKDE(train, torch.arange(10), sigma=0.1)
    x = torch.full((1, 1, 2, 2), 0.31, requires_grad=True)
    logits = kde(x)
    assert logits.argmax().item() == 3
    logits[0, 5].backward()
    assert torch.all(x.grad > 0)  # moving towards class 5's point raises its likelihood


def test_bandwidth_selection_prefers_the_held_out_optimum():
    generator = torch.Generator().manual_seed(0)
    centres = torch.rand(10, 1, 4, 4, generator=generator)
    labels = torch.arange(600) % 10
    images = centres[labels] + 0.15 * torch.randn(600, 1, 4, 4, generator=generator)
    kde = GaussianKDE(images, labels, sigma=1.0)
    settings = TrainOptions(method="kde_bandwidth", extra={"sigma_grid": [0.02, 0.15, 2.0], "n_heldout": 100})
    outcome = select_kde_bandwidth(kde, images, labels, settings, progress=lambda message: None)
    assert kde.sigma == 0.15 and outcome.arch_kwargs == {"sigma": 0.15} and outcome.record["chosen_sigma"] == 0.15
    assert set(settings.extra) == {"sigma_grid", "n_heldout"}  # the settings are not written to
    scores = outcome.record["heldout_loglik"]
    assert scores["0.15"] > scores["0.02"] and scores["0.15"] > scores["2.0"]


def test_non_positive_bandwidth_is_refused():
    with pytest.raises(ValueError, match="sigma"):
        GaussianKDE(torch.rand(10, 1, 2, 2), torch.arange(10), sigma=0.0)
