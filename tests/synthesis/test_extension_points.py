"""The synthesis extension points: objectives and image parametrisations, plugged in by name and driving
``synthesize_batch`` (the worked examples of docs/architecture.md, "Extension points")."""

from __future__ import annotations

import pytest
import torch
from helpers import softmax_score

from controversial.registry import UnknownNameError
from controversial.synthesis.engine import noise_images, ordered_class_pairs, score_images, synthesize_batch
from controversial.synthesis.objectives import hard_score, smooth_score
from controversial.synthesis.options import OBJECTIVES, PARAMETRIZATIONS, SynthesisOptions


def _problem(n_cells: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = ordered_class_pairs()[:: 90 // n_cells][:n_cells]
    return torch.tensor(pairs), noise_images(pairs, [0] * len(pairs), (1, 28, 28))


# --- objectives ---------------------------------------------------------------------------------


@OBJECTIVES.register("softmax_min")
def softmax_min(logits: list[torch.Tensor], targets: torch.Tensor, options: SynthesisOptions) -> torch.Tensor:
    """A toy objective: the paper's Eq. 1 for softmax readouts, each model's softmax probability of its target."""
    return softmax_score(logits, targets)


def test_a_registered_objective_drives_synthesis(tiny_pair) -> None:
    targets, initial = _problem()
    options = SynthesisOptions(objective="softmax_min", max_steps=15, stop_score=None)
    before = softmax_score([m(initial) for m in tiny_pair], targets)
    result = synthesize_batch(tiny_pair, targets, initial, options)
    after = softmax_score([m(result.images) for m in tiny_pair], targets)
    assert torch.all(after > before)
    assert torch.allclose(result.smooth, after)  # the result reports the objective of the 8-bit image
    assert torch.allclose(result.hard, hard_score([m(result.images) for m in tiny_pair], targets))
    with pytest.raises(ValueError, match="objective 'softmax_min' is already registered"):
        OBJECTIVES.register("softmax_min")(softmax_min)
    with pytest.raises(ValueError, match="unknown objective 'softmax'; known: lse, .*softmax_min"):
        SynthesisOptions(objective="softmax")


def test_the_default_objective_is_the_papers_smooth_score(tiny_pair) -> None:
    targets, initial = _problem()
    options = SynthesisOptions(sharpness=2.0)
    _, value, _ = score_images(tiny_pair, initial, targets, options)
    assert options.objective == "lse"
    assert torch.equal(value, smooth_score([m(initial) for m in tiny_pair], targets, 2.0))


# --- parametrisations ---------------------------------------------------------------------------


@PARAMETRIZATIONS.register("tanh")
class TanhParametrization:
    """A toy parametrisation: ``x = (tanh(z) + 1) / 2``."""

    def __init__(self, shape: tuple[int, int, int], options: SynthesisOptions) -> None:
        self.shape = shape

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        return torch.atanh(images.clamp(1e-3, 1 - 1e-3) * 2 - 1)

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(params) + 1) / 2


def test_a_registered_parametrization_drives_synthesis(tiny_pair) -> None:
    targets, initial = _problem()
    before, _, _ = score_images(tiny_pair, initial, targets, SynthesisOptions())
    result = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(parametrization="tanh", max_steps=15))
    assert torch.all(result.hard > before)
    with pytest.raises(ValueError, match="parametrization 'tanh' is already registered"):
        PARAMETRIZATIONS.register("tanh")(TanhParametrization)
    known = "known: cppn, fourier, generator, pixel, tanh"
    with pytest.raises(ValueError, match=f"unknown parametrization 'wavelet'; {known}"):
        SynthesisOptions(parametrization="wavelet")
    with pytest.raises(UnknownNameError, match=known):
        PARAMETRIZATIONS.get("wavelet")
