"""Every extension point is a Registry of one shape: a user's entry plugs in by name, duplicate names are
refused, unknown names are listed with the known ones, and the names are known without importing torch.

The worked examples of docs/architecture.md ("Extension points") are the tests here and in
tests/synthesis/test_extension_points.py; a new architecture with its own training method, trained by
train.py, is tests/zoo/test_adding_a_model.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from controversial.registry import Registry, UnknownNameError
from controversial.synthesis.options import OBJECTIVES, PARAMETRIZATIONS
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import ARCHITECTURES
from controversial.zoo.train_options import AUGMENTATIONS, CALIBRATIONS, TRAINING_METHODS, TrainOptions
from controversial.zoo.training import TrainingMethod, augment, evaluate_and_calibrate

REPO = Path(__file__).resolve().parents[2]
ALL_REGISTRIES = (ARCHITECTURES, TRAINING_METHODS, CALIBRATIONS, AUGMENTATIONS, PARAMETRIZATIONS, OBJECTIVES)


def test_a_registry_refuses_a_taken_name_and_lists_the_known_ones_for_an_unknown_one() -> None:
    colours: Registry[str] = Registry("colour")
    colours.register("red")("#f00")
    colours.add("green", "#0f0")
    assert colours.get("red") == "#f00" and colours.names() == ["green", "red"] and "green" in colours
    with pytest.raises(ValueError, match="colour 'red' is already registered"):
        colours.add("red", "#e00")
    with pytest.raises(UnknownNameError, match="unknown colour 'blue'; known: green, red"):
        colours.get("blue")
    with pytest.raises(ValueError, match="unknown colour 'blue'; known: green, red"):
        colours.check("blue")


def test_a_user_entry_cannot_take_a_built_in_name_even_before_the_built_ins_are_imported() -> None:
    for registry, name in ((CALIBRATIONS, "median"), (TRAINING_METHODS, "supervised"), (ARCHITECTURES, "wrn")):
        with pytest.raises(ValueError, match=f"'{name}' is already registered"):
            registry.add(name, None)


def test_every_built_in_name_is_registered_by_the_module_it_names() -> None:
    for registry in ALL_REGISTRIES:
        for name in registry.names():
            assert registry.get(name) is not None


def test_option_groups_validate_names_without_importing_torch() -> None:
    code = (
        "import sys\nfor name in ('torch', 'torchvision', 'timm'):\n    sys.modules[name] = None\n"
        "from controversial.synthesis.options import SynthesisOptions\n"
        "from controversial.zoo.train_options import CALIBRATIONS, TrainOptions\n"
        "SynthesisOptions(objective='lse', parametrization='fourier')\n"
        "TrainOptions(method='fast', augment='crop_flip')\n"
        "assert CALIBRATIONS.names() == ['cross_entropy', 'median']\n"
        "try:\n    SynthesisOptions(objective='nope')\nexcept ValueError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "unknown objective 'nope'; known: lse" in result.stdout


# --- training methods ---------------------------------------------------------------------------


def _zero_the_weights(net, images, labels, settings, progress) -> None:
    """A toy training method: every parameter set to zero."""
    for parameter in net.parameters():
        parameter.data.zero_()
    progress("zeroed")


TRAINING_METHODS.add("zero_the_weights", TrainingMethod(_zero_the_weights))


def test_a_registered_training_method_is_a_valid_train_method() -> None:
    settings = TrainOptions(method="zero_the_weights", epochs=0)
    net = torch.nn.Linear(4, 10)
    messages: list[str] = []
    TRAINING_METHODS.get(settings.method).train(net, torch.rand(8, 4), torch.zeros(8), settings, messages.append)
    assert messages == ["zeroed"] and all(not p.any() for p in net.parameters())
    with pytest.raises(ValueError, match="training method 'zero_the_weights' is already registered"):
        TRAINING_METHODS.add("zero_the_weights", TrainingMethod(_zero_the_weights))
    with pytest.raises(ValueError, match="unknown training method 'zero_weights'; known: .*zero_the_weights"):
        TrainOptions(method="zero_weights")


# --- calibrations -------------------------------------------------------------------------------


@CALIBRATIONS.register("halve")
def halve(logits: torch.Tensor, labels: torch.Tensor) -> Calibration:
    """A toy calibration: every logit halved, no fit."""
    return Calibration(0.5, 0.0, "halve")


def test_a_registered_calibration_is_fitted_by_the_training_epilogue() -> None:
    net = torch.nn.Linear(4, 10)
    images, labels = torch.rand(50, 4), torch.arange(50) % 10
    evaluation = evaluate_and_calibrate(net, images, labels, "halve")
    assert evaluation.calibration == Calibration(0.5, 0.0, "halve")
    with pytest.raises(ValueError, match="calibration 'halve' is already registered"):
        CALIBRATIONS.register("halve")(halve)
    with pytest.raises(UnknownNameError, match="unknown calibration 'platt'; known: .*halve"):
        evaluate_and_calibrate(net, images, labels, "platt")


# --- augmentations ------------------------------------------------------------------------------


@AUGMENTATIONS.register("upside_down")
def upside_down(images: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """A toy augmentation: the whole batch flipped vertically."""
    return images.flip(-2)


def test_a_registered_augmentation_is_applied_by_the_training_methods() -> None:
    images = torch.rand(4, 1, 6, 6)
    out = augment(images, TrainOptions(augment="upside_down"), torch.Generator())
    assert torch.equal(out, images.flip(-2))
    with pytest.raises(ValueError, match="augmentation 'upside_down' is already registered"):
        AUGMENTATIONS.register("upside_down")(upside_down)
    with pytest.raises(ValueError, match="unknown augmentation 'mixup'; known: crop_flip, shift, upside_down"):
        TrainOptions(augment="mixup")
