"""The 16 entry-level ImageNet categories of model-vs-human: the mapping, the readout and the decision readout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from controversial.analysis.benchmark.decision_options import READOUTS, DecisionsOptions
from controversial.datasets import imagenet16_categories
from controversial.errors import UserError
from controversial.zoo.imagenet16 import IMAGENET16_CLASSES, ImageNet16Readout, imagenet16_indices
from controversial.zoo.readout import CalibratedModel, Calibration


def tiny_imagenet_model(probabilities: torch.Tensor) -> nn.Module:
    """A 1000-class classifier of 2x2 RGB images: the image whose k-th pixel value is 1 (others 0) gets the
    softmax ``probabilities[k]``."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 1000))
    nn.init.zeros_(net[1].weight)
    nn.init.zeros_(net[1].bias)
    with torch.no_grad():
        net[1].weight[:, : len(probabilities)] = probabilities.log().T
    return net


def test_mapping_is_the_benchmarks():
    categories = imagenet16_categories()
    assert tuple(categories) == IMAGENET16_CLASSES == tuple(sorted(IMAGENET16_CLASSES))  # its order: sorted names
    assert len(IMAGENET16_CLASSES) == 16
    indices = imagenet16_indices()
    every = [k for group in indices.values() for k in group]
    # The published index lists hold 207 distinct ImageNet classes (METHODS.md says 227; the lists are the source).
    assert len(every) == len(set(every)) == 207
    assert {c: len(g) for c, g in indices.items()} == {
        "airplane": 1, "bear": 4, "bicycle": 2, "bird": 49, "boat": 5, "bottle": 7, "car": 3, "cat": 6,
        "chair": 4, "clock": 3, "dog": 109, "elephant": 2, "keyboard": 2, "knife": 1, "oven": 1, "truck": 8,
    }  # fmt: skip
    assert indices["airplane"] == [404] and indices["knife"] == [499] and indices["oven"] == [766]
    assert indices["cat"] == [281, 282, 283, 284, 285, 286] and indices["bear"] == [294, 295, 296, 297]
    assert indices["elephant"] == [385, 386] and indices["truck"] == [555, 569, 656, 675, 717, 734, 864, 867]


def test_readout_is_the_log_of_the_mean_fine_class_probability():
    p = torch.zeros(2, 1000, dtype=torch.float64)
    # image 0: half the mass on the airliner (404), the rest spread evenly over the other 999 classes
    p[0] = 0.5 / 999
    p[0, 404] = 0.5
    # image 1: 0.06 on each of cat's six classes (281-286), 0.64 spread over the other 994
    p[1] = 0.64 / 994
    p[1, 281:287] = 0.06
    net = tiny_imagenet_model(p.float())
    mapped = ImageNet16Readout()(net(torch.eye(2, 12).reshape(2, 3, 2, 2))).exp()
    expected = torch.tensor([[0.5 / 999] * 16, [0.64 / 994] * 16])
    expected[0, IMAGENET16_CLASSES.index("airplane")] = 0.5
    expected[1, IMAGENET16_CLASSES.index("cat")] = 0.06
    assert torch.allclose(mapped, expected, rtol=1e-4)
    assert mapped.argmax(1).tolist() == [IMAGENET16_CLASSES.index("airplane"), IMAGENET16_CLASSES.index("cat")]


def test_readout_matches_a_plain_mean_and_stays_finite_where_probabilities_underflow():
    logits = torch.randn(5, 1000, dtype=torch.float64) * 3
    mapped = ImageNet16Readout()(logits)
    softmax = logits.softmax(1)
    plain = torch.stack([softmax[:, g].mean(1) for g in imagenet16_indices().values()], 1)
    assert torch.allclose(mapped.exp().double(), plain, rtol=1e-5)
    extreme = torch.zeros(1, 1000)
    extreme[0, 0] = 200.0  # a tench: every category's probability underflows float32
    extreme.requires_grad_(True)
    out = ImageNet16Readout()(extreme)
    out[0, IMAGENET16_CLASSES.index("dog")].backward()
    assert torch.isfinite(out).all() and torch.isfinite(extreme.grad).all() and extreme.grad.abs().sum() > 0
    assert out[0, 0].item() == pytest.approx(-200.0, abs=1e-3)  # airplane: log p(airliner) = -200 - log(1 + ...)


def test_readout_refuses_a_model_without_1000_outputs():
    with pytest.raises(UserError, match="gives 10 outputs"):
        ImageNet16Readout()(torch.zeros(1, 10))


def calibrated(classes: tuple[str, ...], name: str = "m") -> CalibratedModel:
    return CalibratedModel(nn.Identity(), Calibration(1.0, 0.0, "identity"), name, "imagenet16", classes)


def test_the_imagenet16_decision_readout_is_the_argmax_over_the_16():
    assert DecisionsOptions(readout="imagenet16").readout == "imagenet16"
    p = np.full((2, 16), 0.01)
    p[0, IMAGENET16_CLASSES.index("oven")] = 0.3
    p[1, IMAGENET16_CLASSES.index("bird")] = 0.2
    assert READOUTS["imagenet16"](calibrated(IMAGENET16_CLASSES), p) == ["oven", "bird"]
    with pytest.raises(UserError, match="import the ImageNet model with dataset=imagenet16:<path>"):
        READOUTS["imagenet16"](calibrated(tuple("abc"), "cifar_like"), np.full((1, 3), 0.3))


def test_the_log_count_offset_matters():
    """Mean, not sum: one strong fine class of a small category beats many weak ones of a large category."""
    logits = torch.full((1, 1000), -math.inf)
    indices = imagenet16_indices()
    logits[0, indices["dog"]] = 0.0  # 109 dog classes share ...
    logits[0, indices["knife"]] = math.log(20.0)  # ... less than the knife's mass (20 / 129 against 109 / 129)
    assert IMAGENET16_CLASSES[ImageNet16Readout()(logits).argmax().item()] == "knife"
