"""The KDE's certified candidate sums against the full sum over every training image.

Log-likelihoods and input gradients must match the float64 full sum within 1e-6 relative, on
synthetic data (default suite) and on real MNIST images and a recorded synthesis trajectory
(``--run-data``); both the certified path and the full-class fallback are exercised.
"""

from __future__ import annotations

import pytest
import torch
from conftest import MNIST_CLASSES, make_tiny_model

from controversial.references.kde import FullSumKDE, full_sum_log_likelihoods
from controversial.synthesis.engine import noise_images, ordered_class_pairs, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.zoo.archs.kde import GaussianKDE
from controversial.zoo.readout import CalibratedModel, Calibration

RTOL = 1e-6


def clustered_kde(n: int = 200, shape: tuple[int, ...] = (1, 16, 16), seed: int = 0, **kwargs) -> GaussianKDE:
    """Ten binary patterns at random strengths plus pixel noise: squared distances spread widely and a
    few neighbours decide each class's sum, as on MNIST at sigma 0.15."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 10
    centres = (torch.rand(10, *shape, generator=generator) > 0.7).float()
    strength = 0.3 + 0.7 * torch.rand(n, *[1] * len(shape), generator=generator)
    images = (strength * centres[labels] + 0.03 * torch.randn(n, *shape, generator=generator)).clamp(0, 1)
    return GaussianKDE(images, labels, sigma=0.15, **kwargs)


def near_training_images(kde: GaussianKDE, n: int, scale: float, seed: int) -> torch.Tensor:
    """Training images of several classes, moved by Gaussian noise of the given scale."""
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randperm(len(kde.points), generator=generator)[:n]
    images = kde.points[picks] + scale * torch.randn(n, kde.points.shape[1], generator=generator)
    return images.clamp(0, 1)


class FallbackCounter:
    """Counts the (image, class) rows summed again over more candidates because the first ones could
    not certify them."""

    def __init__(self, kde: GaussianKDE, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        candidate_sums = kde.candidate_sums

        def counting(x, squared, scores, slack, lo, k, with_means):
            if k > kde.n_candidates:
                self.rows += len(x)
            return candidate_sums(x, squared, scores, slack, lo, k, with_means)

        monkeypatch.setattr(kde, "candidate_sums", counting)


def logits_and_gradient(model, images: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    images = images.detach().clone().requires_grad_(True)
    logits = model(images)
    (gradient,) = torch.autograd.grad((logits * weights.to(logits.dtype)).sum(), images)
    return logits.detach(), gradient


def assert_matches_full_sum(kde: GaussianKDE, images: torch.Tensor, seed: int = 0, rtol: float = RTOL) -> None:
    """Values elementwise and each row's input gradient (of a random mix of the classes) in L2 norm."""
    weights = torch.randn(len(images), 10, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    logits, gradient = logits_and_gradient(kde, images, weights)
    assert logits.dtype == gradient.dtype == images.dtype
    expected, expected_gradient = logits_and_gradient(
        lambda x: full_sum_log_likelihoods(kde, x), images.double(), weights
    )
    torch.testing.assert_close(logits.double(), expected, rtol=rtol, atol=0)
    error = (gradient.double() - expected_gradient).flatten(1).norm(dim=1)
    scale = expected_gradient.flatten(1).norm(dim=1)
    assert torch.all(error <= rtol * scale), f"largest relative gradient error {float((error / scale).max()):.3g}"


@pytest.mark.parametrize("batch", [1, 30])
def test_candidate_sums_match_the_full_float64_sum(batch, monkeypatch):
    kde = clustered_kde()
    fallback = FallbackCounter(kde, monkeypatch)
    assert_matches_full_sum(kde, near_training_images(kde, batch, 0.05, seed=batch))
    assert fallback.rows == 0  # the candidates certified every row: the fast path was the one tested


def test_double_precision_inputs_give_double_results_as_exact():
    kde = clustered_kde()
    assert_matches_full_sum(kde, near_training_images(kde, 5, 0.05, seed=1).double(), rtol=1e-10)


def test_rows_the_candidates_cannot_certify_are_summed_in_full(monkeypatch):
    """Far from every training image (pixel noise) or with many equidistant neighbours, the omitted
    mass is not negligible; those rows fall back to the whole class and stay exact."""
    kde = clustered_kde(n_candidates=2)
    fallback = FallbackCounter(kde, monkeypatch)
    uniform = torch.rand(4, 256, generator=torch.Generator().manual_seed(2))
    assert_matches_full_sum(kde, torch.cat([uniform, near_training_images(kde, 4, 0.05, seed=3)]))
    assert fallback.rows > 0
    duplicates = GaussianKDE(torch.ones(40, 1, 4, 4) * 0.5, torch.arange(40) % 10, sigma=0.15, n_candidates=2)
    assert_matches_full_sum(duplicates, torch.rand(3, 1, 4, 4, generator=torch.Generator().manual_seed(4)))


def test_chunked_ranking_gives_the_same_candidates():
    images = near_training_images(clustered_kde(), 6, 0.05, seed=5)
    whole = clustered_kde()(images)
    chunked = clustered_kde(chunk_size=7)(images)
    assert torch.equal(whole, chunked)


def test_no_grad_values_equal_the_differentiable_ones():
    kde = clustered_kde()
    images = near_training_images(kde, 6, 0.05, seed=6)
    with torch.no_grad():
        plain = kde(images)
    assert torch.equal(plain, kde(images.requires_grad_(True)).detach())


def test_an_empty_batch_gives_empty_logits_and_gradients():
    images = torch.rand(0, 1, 16, 16, requires_grad=True)
    logits = clustered_kde()(images)
    logits.sum().backward()
    assert logits.shape == (0, 10) and images.grad is not None and images.grad.shape == images.shape


def test_second_derivatives_are_refused():
    kde = clustered_kde()
    images = near_training_images(kde, 2, 0.05, seed=7).requires_grad_(True)
    with pytest.raises(RuntimeError, match="no second derivatives"):
        torch.autograd.grad(kde(images)[:, 3].sum(), images, create_graph=True)


def test_synthesis_with_the_candidate_sums_follows_the_full_sum():
    """The engine against a tiny partner: the same stimuli, to within an 8-bit level, as with the old
    float32 full sum."""
    kde = clustered_kde(shape=(1, 28, 28))
    calibration = Calibration(0.05, 0.0, "identity")
    fast = CalibratedModel(kde, calibration, "kde", "mnist", MNIST_CLASSES)
    full = CalibratedModel(FullSumKDE(kde), calibration, "kde", "mnist", MNIST_CLASSES)
    models = (fast, full)
    cells = ordered_class_pairs()[:12]
    settings = SynthesisOptions(max_steps=15, stop_score=None)
    initial = noise_images(cells, [0] * len(cells), (1, 28, 28))
    ours, theirs = (synthesize_batch([make_tiny_model(1), m], torch.tensor(cells), initial, settings) for m in models)
    assert (ours.images - theirs.images).abs().max() <= 1 / 255 + 1e-6
    torch.testing.assert_close(ours.smooth, theirs.smooth, rtol=1e-4, atol=1e-5)


# --- real MNIST: the bundled KDE (sigma 0.15) ----------------------------------------------------


@pytest.fixture(scope="module")
def mnist_kde() -> CalibratedModel:
    from controversial.zoo.bundled import load_model

    return load_model("kde", dataset="mnist")


@pytest.mark.data
@pytest.mark.parametrize("batch", [1, 90])
def test_real_mnist_images_match_the_full_sum(mnist_kde, batch):
    from controversial.data import load_uint8

    images, _ = load_uint8("mnist", "test", download=False)
    assert_matches_full_sum(mnist_kde.net, images[:batch].float().div(255))


@pytest.mark.data
def test_real_synthesis_trajectory_matches_the_full_sum(mnist_kde):
    """Record the KDE's inputs over a synthesis of the 90 cells against the bundled VGG, and compare
    every fifth step with the float64 full sum."""
    from controversial.zoo.bundled import load_model

    recorded: list[torch.Tensor] = []
    hook = mnist_kde.net.register_forward_pre_hook(lambda module, args: recorded.append(args[0].detach().clone()))
    cells = ordered_class_pairs()
    try:
        synthesize_batch(
            [load_model("vgg", dataset="mnist"), mnist_kde],
            torch.tensor(cells),
            noise_images(cells, [0] * len(cells), (1, 28, 28)),
            SynthesisOptions(max_steps=30, stop_score=None),
        )
    finally:
        hook.remove()
    for step in range(0, 30, 5):
        assert_matches_full_sum(mnist_kde.net, recorded[step], seed=step)


@pytest.mark.data
def test_real_cifar10_images_and_noise_match_the_full_sum():
    """kde_cifar10 (3,072 dimensions, sigma 0.175): test images and the uniform noise synthesis starts from."""
    from controversial.data import load_uint8
    from controversial.zoo.bundled import load_model

    kde = load_model("kde_cifar10", dataset="cifar10").net
    images, _ = load_uint8("cifar10", "test", download=False)
    noise = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    assert_matches_full_sum(kde, torch.cat([images[:4].float().div(255), noise]))
