"""The mirror-averaged readout (``test_time_flip``): what it computes, where it is allowed, and that train.py
evaluates, calibrates and saves with it while training on single views."""

from __future__ import annotations

import pytest
import torch
from helpers import input_gradient, train_in

from controversial.config import ModelOptions
from controversial.tasks import train
from controversial.zoo.checkpoints import load_checkpoint, read_checkpoint
from controversial.zoo.readout import MirrorAveraged
from controversial.zoo.registry import create_arch

TINY_WRN = dict(depth=10, widen_factor=1)


def _tiny_wrn() -> torch.nn.Module:
    torch.manual_seed(0)
    return create_arch("wrn", **TINY_WRN).eval()


def test_the_readout_is_the_mean_of_both_views_and_cannot_tell_an_image_from_its_mirror():
    net = _tiny_wrn()
    images = torch.rand(4, 3, 32, 32)
    averaged = MirrorAveraged(net)(images)
    with torch.no_grad():
        expected = (net(images) + net(images.flip(-1))) / 2
    assert torch.allclose(averaged, expected, atol=1e-5)
    assert not torch.allclose(net(images), expected, atol=1e-3)  # the two views do differ
    assert torch.allclose(MirrorAveraged(net)(images.flip(-1)), averaged, atol=1e-5)
    grad = input_gradient(MirrorAveraged(net), images)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_it_is_refused_for_digits_whose_mirror_image_is_another_shape():
    fields = dict(name="lenet", arch="small_vgg", test_time_flip=True)
    assert ModelOptions(dataset="cifar10", **fields).test_time_flip
    with pytest.raises(ValueError, match="model lenet: test_time_flip is for datasets.*cifar10.*not mnist"):
        ModelOptions(dataset="mnist", **fields)


YAML = """\
name: flipped
dataset: cifar10
arch: wrn
arch_kwargs: {depth: 10, widen_factor: 1}
calibration: median
test_time_flip: true
train: {method: fast, epochs: 2, batch_size: 50, lr: 0.2, seed: 0, extra: {ema_decay: 0.9}}
"""


def _blobs(dataset: str, split: str, root, download=True) -> tuple[torch.Tensor, torch.Tensor]:
    """Stand-in CIFAR-shaped data: one colour per class, in a mirror-symmetric blob, with noise."""
    generator = torch.Generator().manual_seed(0 if split == "train" else 1)
    labels = torch.arange(200) % 10
    images = torch.rand(200, 3, 32, 32, generator=generator) * 0.4
    colours = torch.rand(10, 3, generator=torch.Generator().manual_seed(2))
    images[:, :, 8:24, 8:24] += 0.6 * colours[labels][:, :, None, None]
    return (images.clamp(0, 1) * 255).to(torch.uint8), labels


@pytest.mark.slow
def test_train_py_calibrates_and_saves_the_mirror_averaged_readout(tmp_path, monkeypatch):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "flipped.yaml").write_text(YAML)
    monkeypatch.setattr(train, "load_uint8", _blobs)
    checkpoint = train_in(tmp_path, ["model=flipped"])

    info, _ = read_checkpoint(checkpoint)
    assert info.test_time_flip and "test_time_flip" not in info.arch_kwargs
    assert 0 <= info.metrics["test_accuracy_single_view"] <= 1
    model = load_checkpoint(checkpoint)
    assert isinstance(model.net, MirrorAveraged)
    images = _blobs("cifar10", "test", None)[0][:8].float() / 255
    assert torch.allclose(model(images), model(images.flip(-1)), atol=1e-4)
    # The calibration was fitted on the averaged logits: the median rule's targets hold for them.
    test_images, test_labels = _blobs("cifar10", "test", None)
    probabilities = model.probabilities(test_images.float() / 255)
    positive = torch.nn.functional.one_hot(test_labels, 10).bool()
    assert probabilities[positive].median() == pytest.approx(0.9, abs=0.02)


def test_a_checkpoint_written_before_the_option_existed_reads_as_single_view(tmp_path):
    path = tmp_path / "old.pt"
    payload = {
        "format_version": 1,
        "name": "old",
        "arch": "wrn",
        "arch_kwargs": TINY_WRN,
        "dataset": "cifar10",
        "calibration": {"slope": 1.0, "intercept": 0.0, "method": "median"},
        "metrics": {},
        "train_config": {},
        "command": "",
        "card": {},
        "code_version": "",
        "created": "",
        "state_dict": _tiny_wrn().state_dict(),
    }
    torch.save(payload, path)
    info, _ = read_checkpoint(path)
    assert info.test_time_flip is False
    assert not isinstance(load_checkpoint(path).net, MirrorAveraged)
