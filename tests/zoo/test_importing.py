"""import_model's library: the three sources, the preprocessing (once, inside the model), the weights and their
errors, the calibration and accuracy it records, and the model file that makes an imported model nameable.

Tiny models and synthetic images only: nothing is downloaded (the one pretrained path is monkeypatched to fail).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import controversial.data
from controversial.config import ModelOptions, check_pair, load_sidecar, register_model_options
from controversial.datasets import DATASETS, DatasetInfo
from controversial.errors import UserError
from controversial.zoo.checkpoints import load_checkpoint, read_checkpoint
from controversial.zoo.importing import ImportOptions, import_model
from controversial.zoo.preprocessing import Preprocess
from controversial.zoo.readout import fit_calibration
from controversial.zoo.sources import TRUSTED_MODULES_ENV, NoNetworkError, build_network, timm_source
from controversial.zoo.weights import read_weights

NETS = '''
import torch
from torch import nn


class MeanNet(nn.Module):
    """Class k scores high when the image's mean intensity is near (k + 0.5) / n_classes."""

    def __init__(self, n_classes: int = 10, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(float(scale)))
        self.register_buffer("centres", torch.arange(n_classes).float() + 0.5)
        self.n_classes = n_classes

    def forward(self, x):
        position = x.mean((1, 2, 3))[:, None] * self.n_classes
        return -self.scale * (position - self.centres) ** 2


class Probe(nn.Module):
    """Records every input it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 10)
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return self.linear(x.mean((1, 2, 3))[:, None])


def mean_net(n_classes: int = 10, scale: float = 1.0):
    return MeanNet(n_classes, scale)


def probe():
    return Probe()
'''


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A module of the user's own ``nn.Module`` factories on the path, as ``python:user_nets:<factory>``."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "user_nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv(TRUSTED_MODULES_ENV, "user_nets")  # the user allows their own code
    return folder


def synthetic_split(name: str, split: str, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-shaped images whose mean intensity encodes the label (MeanNet reads them perfectly)."""
    n = 60 if split == "train" else 40
    generator = torch.Generator().manual_seed(0 if split == "train" else 1)
    labels = torch.arange(n) % 10
    level = (labels.float() + 0.5) / 10 * 255
    noise = torch.randint(-3, 4, (n, 1, 28, 28), generator=generator)
    images = (level.view(-1, 1, 1, 1) + noise).clamp(0, 255).to(torch.uint8)
    return images, labels


@pytest.fixture
def fake_data(monkeypatch):
    monkeypatch.setattr(controversial.data, "load_uint8", synthetic_split)


def options(tmp_path: Path, **values) -> ImportOptions:
    defaults = {"name": "mine", "dataset": "mnist", "models_dir": str(tmp_path / "models"), "device": "cpu"}
    return ImportOptions(**{**defaults, **values})


def python_model_weights(tmp_path: Path, scale: float = 2.0, wrap: str | None = None) -> Path:
    from user_nets import MeanNet  # the user_code fixture put it on the path

    state = MeanNet(scale=scale).state_dict()
    path = tmp_path / "mean_net.pt"
    torch.save({wrap: state, "epoch": 3} if wrap else state, path)
    return path


def test_a_python_source_is_imported_calibrated_measured_and_recorded(tmp_path, user_code, fake_data):
    weights = python_model_weights(tmp_path, wrap="state_dict")  # a training checkpoint holding the state dict
    settings = options(
        tmp_path, source="python:user_nets:mean_net", weights=str(weights), input_size=[1, 28, 28], mean=[0], std=[1]
    )
    path = import_model(settings, "python import_model.py name=mine")
    info, state = read_checkpoint(path)
    assert info.arch == "imported" and info.command == "python import_model.py name=mine"
    assert info.arch_kwargs["source"] == "python:user_nets:mean_net" and info.arch_kwargs["num_classes"] == 10
    assert info.metrics["weights_sha256"] == __import__("hashlib").sha256(weights.read_bytes()).hexdigest()
    assert info.metrics["test_accuracy"] == 1.0 and info.metrics["n_test"] == 40
    assert "60 training images" in info.metrics["calibrated_on"]
    assert state["net.scale"].float().item() == 2.0  # the file's weights, not the factory's default
    # The calibration is the one fitted on the (whole, here) training split, not on the test split.
    model = load_checkpoint(path)
    train_x, train_y = synthetic_split("mnist", "train")
    expected = fit_calibration("cross_entropy", model.raw_logits(train_x.float() / 255).double(), train_y)
    assert info.calibration.method == "cross_entropy" and info.calibration.slope > 0
    assert info.calibration.slope == pytest.approx(expected.slope, rel=1e-3)
    assert info.calibration.intercept == pytest.approx(expected.intercept, rel=1e-3, abs=1e-4)
    sidecar = yaml.safe_load(path.with_suffix(".yaml").read_text())
    assert sidecar["arch"] == "imported" and sidecar["checkpoint"] == "mine.pt" and "dataset_info" not in sidecar
    assert load_sidecar(path.with_suffix(".yaml")).checkpoint == str(path)


def test_median_calibration_is_recorded(tmp_path, user_code, fake_data):
    settings = options(
        tmp_path,
        source="python:user_nets:mean_net",
        weights=str(python_model_weights(tmp_path)),
        input_size=[1, 28, 28],
        mean=[0],
        std=[1],
        calibration="median",
        calibration_images=30,
    )
    info, _ = read_checkpoint(import_model(settings))
    assert info.calibration.method == "median" and "30 training images" in info.metrics["calibrated_on"]


def test_a_timm_model_on_greyscale_images_loads_back_with_the_same_outputs(tmp_path, fake_data):
    timm = pytest.importorskip("timm")
    net = timm.create_model("test_resnet", num_classes=10)
    weights = tmp_path / "test_resnet.pt"
    torch.save(net.state_dict(), weights)
    settings = options(tmp_path, source="timm:test_resnet", weights=str(weights), input_size=[3, 32, 32], float16=False)
    info, _ = read_checkpoint(import_model(settings))
    assert info.arch_kwargs["mean"] == [0.5, 0.5, 0.5] and info.arch_kwargs["std"] == [0.5, 0.5, 0.5]  # timm's cfg
    assert "mean, std from timm's pretrained config" in info.metrics["preprocessing"]
    model = load_checkpoint(tmp_path / "models" / "mnist" / "mine.pt")  # batch norms folded: equal up to rounding
    images = torch.rand(4, 1, 28, 28)
    resized = torch.nn.functional.interpolate(images.expand(-1, 3, -1, -1), (32, 32), mode="bilinear")
    with torch.no_grad():
        expected = net.eval()((resized - 0.5) / 0.5)
        assert torch.allclose(model.raw_logits(images), expected, atol=1e-4)


def test_a_torchvision_model_is_built_by_name(tmp_path, user_code, fake_data):
    pytest.importorskip("torchvision")
    net = build_network("torchvision:squeezenet1_1", 10, {"dropout": 0.0})
    weights = tmp_path / "squeeze.pt"
    torch.save(net.state_dict(), weights)
    settings = options(
        tmp_path,
        source="torchvision:squeezenet1_1",
        arch_kwargs={"dropout": 0.0},
        weights=str(weights),
        input_size=[3, 32, 32],
        mean=[0.485, 0.456, 0.406],
        std=[0.229, 0.224, 0.225],
    )
    model = load_checkpoint(import_model(settings))
    assert model.name == "mine" and model(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_preprocessing_is_applied_once_inside_the_model(tmp_path, user_code, fake_data):
    settings = options(
        tmp_path, source="python:user_nets:probe", weights=None, input_size=[1, 28, 28], mean=[0.5], std=[0.25]
    )
    model = load_checkpoint(import_model(settings))
    probe = model.net.net
    probe.seen.clear()
    images = torch.rand(3, 1, 28, 28)
    model(images)
    assert len(probe.seen) == 1 and torch.allclose(probe.seen[0], (images - 0.5) / 0.25)


def test_resizing_shrinks_with_antialiasing_so_every_pixel_reaches_the_model():
    large = torch.rand(1, 1, 224, 224, requires_grad=True)
    out = Preprocess([3, 32, 32], [0.0] * 3, [1.0] * 3)(large)
    assert out.shape == (1, 3, 32, 32)
    out.sum().backward()
    assert (large.grad != 0).all()  # without antialiasing about 98% of the pixels would get no gradient
    with pytest.raises(UserError, match="one value per input channel"):
        Preprocess([3, 32, 32], [0.5], [0.5])


def test_weights_that_do_not_fit_name_the_keys_and_shapes(tmp_path, user_code, fake_data):
    from user_nets import MeanNet

    state = MeanNet().state_dict()
    state["extra.weight"] = torch.zeros(2)
    state["centres"] = torch.zeros(7)
    del state["scale"]
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    settings = options(tmp_path, source="python:user_nets:mean_net", weights=str(bad), mean=[0], std=[1])
    with pytest.raises(UserError) as refused:
        import_model(settings.model_copy(update={"input_size": [1, 28, 28]}))
    text = str(refused.value)
    assert "missing keys 1 (scale)" in text and "unexpected keys 1 (extra.weight)" in text
    assert "centres (7,) vs (10,)" in text and str(bad) in text


def test_a_file_that_is_not_a_state_dict_is_refused(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([torch.zeros(1)], path)
    with pytest.raises(UserError, match="not a state dict"):
        read_weights(path)
    with pytest.raises(UserError, match="no such file"):
        read_weights(tmp_path / "none.pt")
    parallel = tmp_path / "parallel.pt"
    torch.save({"module.a": torch.ones(1)}, parallel)
    assert list(read_weights(parallel)) == ["a"]  # DataParallel's prefix dropped


def test_no_network_says_which_weights_file_to_pass(monkeypatch):
    timm = pytest.importorskip("timm")

    def offline(*args, pretrained=False, **kwargs):
        if pretrained:
            raise OSError("We couldn't connect to 'https://huggingface.co'")
        raise AssertionError("only the download is tried")

    monkeypatch.setattr(timm, "create_model", offline)
    with pytest.raises(NoNetworkError) as refused:
        timm_source("test_resnet", 1000, {}, pretrained=True)
    text = str(refused.value)
    assert "weights=test_resnet.pt" in text and "timm/test_resnet" in text and "couldn't connect" in text
    with pytest.raises(UserError, match="needs 10: a new head would be random"):
        timm_source("test_resnet", 10, {}, pretrained=True)


def test_sources_that_cannot_be_built_are_explained(user_code):
    pytest.importorskip("timm")
    with pytest.raises(UserError, match="did you mean .*test_resnet"):
        build_network("timm:test_resnett", 10, {})
    with pytest.raises(UserError, match="PYTHONPATH"):
        build_network("python:no_such_module:build", 10, {}, named=True)  # named on import_model's command line
    with pytest.raises(UserError, match="no callable 'mean_nett'.*did you mean mean_net"):
        build_network("python:user_nets:mean_nett", 10, {})
    with pytest.raises(UserError, match="arch_kwargs"):
        build_network("python:user_nets:mean_net", 10, {"depth": 3})
    with pytest.raises(UserError, match="kinds: python, timm, torchvision"):
        build_network("keras:resnet", 10, {})


def test_preprocessing_without_a_pretrained_config_is_required(tmp_path, user_code, fake_data):
    settings = options(tmp_path, source="python:user_nets:mean_net", weights=None)
    with pytest.raises(UserError, match="no pretrained configuration to take input_size, mean, std"):
        import_model(settings)


def test_a_model_file_that_clashes_with_a_conf_model_is_an_error_naming_both(tmp_path):
    folder = tmp_path / "models" / "mnist"
    folder.mkdir(parents=True)
    (folder / "vgg.yaml").write_text("name: vgg\ndataset: mnist\narch: imported\ncheckpoint: vgg.pt\n")
    with pytest.raises(UserError) as refused:
        register_model_options(dirs=[tmp_path / "models"])
    assert "conf/model/vgg.yaml" in str(refused.value) and str(folder / "vgg.yaml") in str(refused.value)


def test_a_pair_whose_class_lists_differ_is_refused_naming_both(monkeypatch):
    three = DatasetInfo("shapes3", (1, 28, 28), ("circle", "square", "star"), "Shapes", False, "folder:/x")
    monkeypatch.setitem(DATASETS, "shapes3", three)
    a = ModelOptions(name="a", dataset="mnist", arch="imported", checkpoint="a.pt")
    b = ModelOptions(name="b", dataset="shapes3", arch="imported", checkpoint="b.pt")
    with pytest.raises(UserError) as refused:
        check_pair(a, b)
    assert "['circle', 'square', 'star']" in str(refused.value) and "'0', '1'" in str(refused.value)


def test_safetensors_weights_are_read(tmp_path, user_code):
    safetensors = pytest.importorskip("safetensors.torch")
    from user_nets import MeanNet

    path = tmp_path / "mean_net.safetensors"
    safetensors.save_file(MeanNet(scale=3.0).state_dict(), str(path))
    assert read_weights(path)["scale"].item() == 3.0


def test_loading_a_python_model_whose_module_is_gone_says_pythonpath(tmp_path, user_code, fake_data, monkeypatch):
    settings = options(
        tmp_path, source="python:user_nets:mean_net", weights=None, input_size=[1, 28, 28], mean=[0], std=[1]
    )
    path = import_model(settings)
    monkeypatch.delitem(sys.modules, "user_nets")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(user_code)])
    with pytest.raises(UserError, match="module 'user_nets' cannot be imported.*PYTHONPATH"):
        load_checkpoint(path)


def write_folder(root: Path, classes: Sequence[str], per_class: int, size: int, channels: int) -> Path:
    """A class-subfolder image folder of random PNGs."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size, size, channels)[: 3 if channels == 3 else 2], dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.fixture
def forget_datasets():
    """Datasets registered by a test are forgotten after it (registration is process-wide)."""
    before = dict(DATASETS)
    yield
    DATASETS.clear()
    DATASETS.update(before)


def test_a_folder_dataset_travels_with_the_model(tmp_path, user_code, forget_datasets):
    folder = write_folder(tmp_path / "shapes", ("circle", "square", "star"), 5, 12, 1)
    settings = options(
        tmp_path,
        dataset=f"folder:{folder}",
        source="python:user_nets:mean_net",
        arch_kwargs={"n_classes": 3},
        input_size=[1, 12, 12],
        mean=[0],
        std=[1],
    )
    path = import_model(settings)
    assert path == tmp_path / "models" / "shapes" / "mine.pt"
    sidecar = yaml.safe_load(path.with_suffix(".yaml").read_text())
    assert sidecar["dataset_info"]["class_names"] == ["circle", "square", "star"]
    DATASETS.pop("shapes")  # a fresh process: the model file and the checkpoint describe it
    assert load_sidecar(path.with_suffix(".yaml")).dataset == "shapes"
    assert load_checkpoint(path).class_names == ("circle", "square", "star")


def test_a_second_model_onto_another_folder_of_the_same_name_is_refused_before_writing(
    tmp_path, user_code, forget_datasets
):
    """Two descriptions of 'shapes' in one models folder would stop every later command that reads both (a moved
    folder is the same dataset: tests/zoo/test_moved_dataset.py)."""
    first = write_folder(tmp_path / "a" / "shapes", ("circle", "square", "star"), 5, 12, 1)
    values = dict(source="python:user_nets:mean_net", arch_kwargs={"n_classes": 3}, mean=[0], std=[1])
    import_model(options(tmp_path, dataset=f"folder:{first}", input_size=[1, 12, 12], **values))
    other = write_folder(tmp_path / "b" / "shapes", ("circle", "square", "triangle"), 5, 12, 1)
    DATASETS.pop("shapes")  # a new process
    settings = options(tmp_path, name="second", dataset=f"folder:{other}", input_size=[1, 12, 12], **values)
    with pytest.raises(UserError, match=r"mine\.yaml \(a model imported before\).*class_names.*folder\.name="):
        import_model(settings)
    assert sorted(p.name for p in (tmp_path / "models" / "shapes").iterdir()) == ["mine.pt", "mine.yaml"]
    import_model(settings.model_copy(update={"folder": settings.folder.model_copy(update={"name": "shapes_b"})}))
    assert (tmp_path / "models" / "shapes_b" / "second.pt").is_file()


def test_an_imagenet_model_keeps_its_1000_outputs_behind_the_16_class_readout(tmp_path, forget_datasets):
    timm = pytest.importorskip("timm")
    from controversial.zoo.imagenet16 import IMAGENET16_CLASSES, ImageNet16Readout

    folder = write_folder(tmp_path / "in16", IMAGENET16_CLASSES, 2, 16, 3)
    net = timm.create_model("test_resnet")  # 1000 ImageNet classes
    weights = tmp_path / "test_resnet_in1k.pt"
    torch.save(net.state_dict(), weights)
    settings = options(
        tmp_path,
        dataset=f"imagenet16:{folder}",
        folder={"image_size": 16},
        source="timm:test_resnet",
        weights=str(weights),
        float16=False,
    )
    info, _ = read_checkpoint(import_model(settings))
    assert info.arch_kwargs["num_classes"] == 1000 and info.arch_kwargs["readout"] == "imagenet16"
    assert info.arch_kwargs["input_size"] == [3, 160, 160]  # timm's pretrained config
    model = load_checkpoint(tmp_path / "models" / "imagenet16" / "mine.pt")
    images = torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        resized = torch.nn.functional.interpolate(images, (160, 160), mode="bilinear")
        expected = ImageNet16Readout()(net.eval()((resized - 0.5) / 0.5))
        assert model.class_names == IMAGENET16_CLASSES
        assert torch.allclose(model.raw_logits(images), expected, atol=1e-4)
