import math

import pytest
import torch

from controversial.registry import UnknownNameError
from controversial.zoo.readout import fit_calibration, fit_cross_entropy, fit_median_rule, sigmoid_nll


def _synthetic_logits(n: int = 4000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=generator)
    logits = torch.randn(n, 10, generator=generator) * 2.0
    logits[torch.arange(n), labels] += 5.0
    return logits, labels


def test_cross_entropy_fit_is_a_minimum_of_the_sigmoid_nll():
    logits, labels = _synthetic_logits()
    calibration = fit_cross_entropy(logits, labels)
    best = sigmoid_nll(calibration.apply(logits), labels)
    for ds, dt in [(0.05, 0), (-0.05, 0), (0, 0.1), (0, -0.1)]:
        perturbed = logits * (calibration.slope + ds) + calibration.intercept + dt
        assert sigmoid_nll(perturbed, labels) > best
    assert best < sigmoid_nll(logits, labels)


def test_cross_entropy_fit_is_equivariant_to_the_logit_scale():
    # Multiplying a model's logits by k must divide the fitted slope by k and keep the intercept.
    logits, labels = _synthetic_logits(seed=1)
    base = fit_cross_entropy(logits, labels)
    rescaled = fit_cross_entropy(logits * 4.0, labels)
    assert rescaled.slope == pytest.approx(base.slope / 4.0, rel=1e-3)
    assert rescaled.intercept == pytest.approx(base.intercept, abs=1e-3)


def test_median_rule_hits_the_target_medians():
    logits, labels = _synthetic_logits()
    calibration = fit_median_rule(logits, labels)
    probabilities = torch.sigmoid(calibration.apply(logits.double()))
    positive = torch.nn.functional.one_hot(labels, 10).bool()
    assert probabilities[positive].median().item() == pytest.approx(0.9, abs=1e-3)
    assert probabilities[~positive].median().item() == pytest.approx(0.1, abs=1e-3)
    m_pos, m_neg = logits[positive].median().item(), logits[~positive].median().item()
    assert calibration.slope == pytest.approx(2 * math.log(9) / (m_pos - m_neg), rel=1e-6)


@pytest.mark.parametrize("method", ["cross_entropy", "median"])
def test_calibration_never_changes_the_argmax(method):
    logits, labels = _synthetic_logits(seed=3)
    calibration = fit_calibration(method, logits, labels)
    assert calibration.slope > 0
    assert torch.equal(calibration.apply(logits).argmax(1), logits.argmax(1))


def test_median_rule_refuses_a_model_that_does_not_separate_classes():
    logits = torch.zeros(100, 10)
    logits[:, 0] = 5.0
    labels = torch.full((100,), 3)
    with pytest.raises(ValueError, match="median positive logit"):
        fit_median_rule(logits, labels)


def test_unknown_method_names_the_allowed_ones():
    with pytest.raises(UnknownNameError, match="unknown calibration 'platt'; known: cross_entropy, .*median"):
        fit_calibration("platt", torch.zeros(2, 10), torch.zeros(2, dtype=torch.long))
