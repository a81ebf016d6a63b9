"""docs/adding_a_model.md, followed step by step with a small new family: a nearest-class-mean classifier
with its own training method and ``train.extra`` schema, trained by the train task and used in synthesis."""

from dataclasses import dataclass

import pytest
import torch
from conftest import make_tiny_model
from helpers import train_in
from torch import nn

from controversial.config import load_model_config
from controversial.synthesis.engine import noise_images, ordered_class_pairs, synthesize_batch
from controversial.synthesis.options import SynthesisOptions
from controversial.tasks import train
from controversial.zoo.checkpoints import load_checkpoint, read_checkpoint
from controversial.zoo.protocol import SynthesisModel
from controversial.zoo.registry import register_arch
from controversial.zoo.train_options import TRAINING_METHODS, TrainOptions
from controversial.zoo.training import TrainingMethod, TrainOutcome, options


# Step 1: the architecture, registered under a name.
class NearestMean(nn.Module):
    """Logits are minus the squared distance to each class's mean image, divided by a temperature."""

    def __init__(self, image_shape: tuple[int, int, int] = (1, 28, 28), temperature: float = 1.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.register_buffer("means", torch.zeros(10, *image_shape))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return -((images[:, None] - self.means[None]) ** 2).flatten(2).sum(2) / self.temperature


@register_arch("nearest_mean")
def nearest_mean(**kwargs) -> NearestMean:
    return NearestMean(**kwargs)


# Step 3: the family's own training method, with the typed schema of its ``train.extra``.
@dataclass(frozen=True)
class ClassMeansExtra:
    shrinkage: float = 0.0  # pull every class mean this far towards the grand mean


def fit_class_means(
    net: NearestMean, images: torch.Tensor, labels: torch.Tensor, settings: TrainOptions, progress
) -> TrainOutcome:
    extra: ClassMeansExtra = options(settings)
    means = torch.stack([images[labels == k].mean(0) for k in range(10)])
    net.means.copy_((1 - extra.shrinkage) * means + extra.shrinkage * images.mean(0))
    spread = float(net.means.flatten(1).std(0).mean())
    progress(f"class means fitted, mean spread {spread:.3f}")
    return TrainOutcome(record={"mean_spread": spread})


TRAINING_METHODS.add("class_means", TrainingMethod(fit_class_means, extra=ClassMeansExtra))

# Step 2: the YAML.
YAML = """\
name: nearest
dataset: mnist
arch: nearest_mean
arch_kwargs: {image_shape: [1, 28, 28], temperature: 20.0}
calibration: cross_entropy
paper_name: ""
description: Nearest class mean in pixel space (a test family).
differences: Not in the paper.
train: {method: class_means, epochs: 0, seed: 0, extra: {shrinkage: 0.1}}
"""


def _digits(dataset: str, split: str, root, download=True) -> tuple[torch.Tensor, torch.Tensor]:
    """Stand-in data: a bright square per class at a class-specific place, with noise."""
    generator = torch.Generator().manual_seed(0 if split == "train" else 1)
    labels = torch.arange(200) % 10
    images = torch.rand(200, 1, 28, 28, generator=generator) * 0.3
    for k in range(10):
        images[labels == k, :, 2 * k : 2 * k + 8, 2 * k : 2 * k + 8] += 0.6
    return (images.clamp(0, 1) * 255).to(torch.uint8), labels


def _run_train(tmp_path, monkeypatch, overrides: list[str]):
    monkeypatch.setattr(train, "load_uint8", _digits)
    return train_in(tmp_path, overrides)


def test_a_new_family_is_an_architecture_module_and_a_yaml(tmp_path, monkeypatch):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    path = tmp_path / "conf" / "model" / "nearest.yaml"
    path.write_text(YAML)
    assert load_model_config(path).train.extra == {"shrinkage": 0.1}

    # Step 4: train it with the train task, then use the checkpoint like any other.
    checkpoint = _run_train(tmp_path, monkeypatch, ["model=nearest"])
    info, _ = read_checkpoint(checkpoint)
    assert info.arch == "nearest_mean" and info.train_config["extra"]["shrinkage"] == 0.1
    assert info.metrics["test_accuracy"] > 0.9 and "mean_spread" in info.train_config["extra"]
    model = load_checkpoint(checkpoint)
    assert isinstance(model, SynthesisModel)
    pairs = ordered_class_pairs()[:4]
    initial = noise_images(pairs, [0] * 4, (1, 28, 28))
    result = synthesize_batch(
        [model, make_tiny_model(1)], torch.tensor(pairs), initial, SynthesisOptions(max_steps=20, stop_score=None)
    )
    assert torch.isfinite(result.hard).all()


def test_a_typo_in_train_extra_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    path = tmp_path / "conf" / "model" / "typo.yaml"
    path.write_text(YAML.replace("name: nearest", "name: typo").replace("shrinkage:", "shrinkge:"))
    with pytest.raises(ValueError, match=r"typo.yaml: invalid model config.*shrinkge.*allowed keys: shrinkage"):
        load_model_config(path)
    with pytest.raises(ValueError, match="shrinkge"):
        _run_train(tmp_path, monkeypatch, ["model=typo"])
