import math

import pytest
import torch
from helpers import softmax_score

from controversial.synthesis.objectives import controversy_terms, hard_score, smooth_score


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def test_two_model_terms_match_eq2_by_hand():
    # model A: logits for classes 0..2; model B likewise; targets a=0, b=2
    la = torch.tensor([[2.0, 0.0, -1.0]])
    lb = torch.tensor([[-3.0, 0.5, 1.5]])
    targets = torch.tensor([[0, 2]])
    terms = controversy_terms([la, lb], targets)
    assert terms.tolist() == [[2.0, 1.0, 3.0, 1.5]]  # lA(a), -lA(b), -lB(a), lB(b)
    expected_hard = min(_sigmoid(2.0), 1 - _sigmoid(-1.0), _sigmoid(1.5), 1 - _sigmoid(-3.0))
    assert hard_score([la, lb], targets).item() == pytest.approx(expected_hard, abs=1e-6)
    assert expected_hard == pytest.approx(_sigmoid(1.0))


def test_smooth_score_is_inverted_logsumexp_by_hand():
    la = torch.tensor([[2.0, 0.0, -1.0]])
    lb = torch.tensor([[-3.0, 0.5, 1.5]])
    targets = torch.tensor([[0, 2]])
    sharpness = 2.0
    expected = -math.log(sum(math.exp(-sharpness * v) for v in [2.0, 1.0, 3.0, 1.5])) / sharpness
    assert smooth_score([la, lb], targets, sharpness).item() == pytest.approx(expected, abs=1e-6)


def test_smooth_score_approaches_min_as_sharpness_grows_and_never_exceeds_it():
    torch.manual_seed(0)
    logits = [torch.randn(5, 10), torch.randn(5, 10)]
    targets = torch.tensor([[1, 2], [3, 4], [0, 9], [5, 6], [7, 8]])
    minimum = controversy_terms(logits, targets).min(1).values
    for sharpness in (1.0, 10.0, 1000.0):
        assert torch.all(smooth_score(logits, targets, sharpness) <= minimum + 1e-6)
    assert torch.allclose(smooth_score(logits, targets, 1000.0), minimum, atol=1e-2)


def test_three_models_each_detect_own_target_and_none_of_the_others():
    logits = [torch.zeros(1, 10) for _ in range(3)]
    logits[0][0, 4] = 3.0  # model 0 sees its target 4
    logits[1][0, 4] = 2.0  # model 1 also sees model 0's target: penalised as -2
    targets = torch.tensor([[4, 5, 6]])
    terms = controversy_terms(logits, targets)
    assert terms.shape == (1, 9)
    assert terms.min().item() == -2.0
    assert hard_score(logits, targets).item() == pytest.approx(_sigmoid(-2.0))


def test_softmax_score_eq1():
    la = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    lb = torch.log(torch.tensor([[0.1, 0.3, 0.6]]))
    assert softmax_score([la, lb], torch.tensor([[0, 2]])).item() == pytest.approx(0.6, abs=1e-6)


def test_invalid_sharpness_and_target_shape_are_rejected():
    logits = [torch.zeros(1, 10), torch.zeros(1, 10)]
    with pytest.raises(ValueError, match="sharpness"):
        smooth_score(logits, torch.tensor([[0, 1]]), 0.0)
    with pytest.raises(ValueError, match="columns"):
        controversy_terms(logits, torch.tensor([[0, 1, 2]]))
