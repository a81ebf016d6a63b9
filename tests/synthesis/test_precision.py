"""bfloat16 autocast in the synthesis steps: acceptance always rests on float32 scores of the 8-bit image."""

import pytest
import torch
from conftest import make_tiny_model
from helpers import settings_for
from pydantic import ValidationError

from controversial.synthesis import precision
from controversial.synthesis.engine import (
    noise_images,
    ordered_class_pairs,
    score_images,
    synthesize_batch,
)
from controversial.synthesis.options import SynthesisOptions
from controversial.synthesis.precision import bfloat16_models, low_precision_weights, model_logits
from controversial.zoo.inference import compile_networks
from controversial.zoo.readout import CalibratedModel, Calibration

FAST = dict(max_steps=30, stop_score=None)


def _problem(n_cells: int = 8):
    pairs = ordered_class_pairs()[:: 90 // n_cells][:n_cells]
    return torch.tensor(pairs), noise_images(pairs, [0] * len(pairs), (1, 28, 28))


def test_a_bf16_found_image_is_rescored_in_fp32(tiny_pair):
    targets, initial = _problem()
    low = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(precision="bf16", **FAST))
    full = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(precision="fp32", **FAST))
    assert not torch.equal(low.images, full.images)  # the steps really ran in bfloat16
    assert low.images.dtype == torch.float32
    hard, smooth, probabilities = score_images(tiny_pair, low.images, targets, SynthesisOptions())
    assert torch.equal(low.hard, hard) and torch.equal(low.smooth, smooth)
    assert torch.equal(low.probabilities, probabilities)
    # Scoring ignores any autocast the caller has on: the accepted rule is the float32 rule.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast, _, _ = score_images(tiny_pair, low.images, targets, SynthesisOptions())
    assert torch.equal(under_autocast, hard)


def test_a_family_that_declares_fp32_stays_fp32(tiny_pair):
    targets, initial = _problem(4)
    for model in tiny_pair:
        model.net.bfloat16_synthesis = False
    assert bfloat16_models(tiny_pair, "bf16", torch.device("cpu")) == [False, False]
    low = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(precision="bf16", **FAST))
    full = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(precision="fp32", **FAST))
    assert torch.equal(low.images, full.images) and torch.equal(low.hard, full.hard)


def test_precision_choice_per_model(monkeypatch):
    fp32_family = make_tiny_model(3)
    fp32_family.net.bfloat16_synthesis = False
    models = [make_tiny_model(1), fp32_family]
    cpu = torch.device("cpu")
    assert bfloat16_models(models, "fp32", cpu) == [False, False]
    assert bfloat16_models(models, "bf16", cpu) == [True, False]
    monkeypatch.setattr(precision, "bfloat16_native", lambda device: False)
    assert bfloat16_models(models, "auto", cpu) == [False, False]
    monkeypatch.setattr(precision, "bfloat16_native", lambda device: True)
    assert bfloat16_models(models, "auto", cpu) == [True, False]
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16, auto"):
        bfloat16_models(models, "fp16", cpu)


def _conv_model() -> CalibratedModel:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 28 * 28, 10),
    )
    net[1].running_mean.normal_()
    net[1].running_var.uniform_(0.5, 2)
    model = CalibratedModel(net, Calibration(1.3, -0.5, "identity"), "conv", "mnist", tuple("0123456789"))
    return model.eval().requires_grad_(False)


def _logits_and_input_gradient(model, images, weights):
    images = images.clone().requires_grad_(True)
    (logits,) = model_logits([model], images, [True], weights)
    logits.sum().backward()
    return logits, images.grad


def test_weights_cast_once_give_autocasts_logits_and_gradients():
    """Casting the frozen weights to bfloat16 once per batch rounds them as autocast does at every call."""
    model = _conv_model()
    weights = low_precision_weights(model)
    assert set(weights) == {"net.0.weight", "net.0.bias", "net.4.weight", "net.4.bias"}  # not the batch norm's
    assert all(w.dtype == torch.bfloat16 for w in weights.values())
    images = torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    once, once_gradient = _logits_and_input_gradient(model, images, [weights])
    every_call, every_call_gradient = _logits_and_input_gradient(model, images, None)
    assert torch.equal(once, every_call) and torch.equal(once_gradient, every_call_gradient)
    full = model(images)
    assert not torch.equal(once, full) and torch.allclose(once, full, atol=0.1)  # bfloat16 really ran
    assert next(model.parameters()).dtype == torch.float32  # the model's own weights are untouched


def test_a_weight_another_layer_also_uses_stays_float32():
    model = _conv_model()
    model.net.append(torch.nn.Module())
    model.net[5].shared = model.net[4].weight  # a layer of another type holding the same tensor
    assert "net.4.weight" not in low_precision_weights(model)
    assert "net.0.weight" in low_precision_weights(model)


def test_the_command_takes_the_precision_and_refuses_others():
    assert settings_for("synthesize").synthesis.precision == "fp32"
    assert settings_for("synthesize", ["synthesis.precision=auto"]).synthesis.precision == "auto"
    with pytest.raises(ValidationError, match="synthesis.precision"):
        settings_for("synthesize", ["synthesis.precision=fp16"])


@pytest.mark.slow
def test_compiled_networks_synthesize_what_eager_ones_do():
    """synthesis.torch_compile wraps the networks only: the same images up to float rounding, the same rule."""
    targets, initial = _problem(4)
    eager, compiled = [make_tiny_model(1), make_tiny_model(2)], [make_tiny_model(1), make_tiny_model(2)]
    compile_networks(compiled)
    assert all(isinstance(m.net, torch._dynamo.eval_frame.OptimizedModule) for m in compiled)
    full = synthesize_batch(eager, targets, initial, SynthesisOptions(**FAST))
    fast = synthesize_batch(compiled, targets, initial, SynthesisOptions(**FAST))
    assert torch.allclose(fast.images, full.images, atol=1e-3)
    assert torch.allclose(fast.hard, full.hard, atol=1e-3) and torch.equal(fast.steps, full.steps)
