"""The naturalness measure: KID x 10^3 against a feature network's reference test features, with its floor
(real test images) and ceiling (uniform noise); tiny random feature networks and synthetic images by default,
the bundled networks on the real test sets behind the data marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import make_sweep, run_task, tiny_abs_vgg_overrides

from controversial.config import register_model_options
from controversial.datasets import DatasetInfo, dataset_info
from controversial.errors import UserError
from controversial.synthesis import naturalness as nat
from controversial.synthesis import sweep_overview as overview
from controversial.synthesis.naturalness import NaturalnessOptions, NaturalnessUnavailable, naturalness
from controversial.zoo.bundled import feature_network_path, list_checkpoints
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch


def blobs(n: int, seed: int) -> torch.Tensor:
    """Synthetic 'real' images: a bright rectangle on a dark background, like a stroke of a digit."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.zeros(n, 1, 28, 28)
    corners = torch.randint(2, 16, (n, 2), generator=generator)
    sizes = torch.randint(4, 11, (n, 2), generator=generator)
    for image, (y, x), (h, w) in zip(images, corners.tolist(), sizes.tolist()):
        image[:, y : y + h, x : x + w] = 1.0
    return images


def write_feature_network(path: Path, dataset: str = "mnist", test_images: torch.Tensor | None = None) -> Path:
    """A tiny random MLP as a feature network, its reference statistics taken on synthetic test images."""
    kwargs = {"image_shape": [1, 28, 28], "hidden": 32, "seed": 3}
    net = create_arch("tiny_mlp", **kwargs)
    test_images = blobs(400, seed=0) if test_images is None else test_images
    info = CheckpointInfo(
        name=f"features_{dataset}",
        arch="tiny_mlp",
        arch_kwargs=kwargs,
        dataset=dataset,
        calibration=Calibration(1.0, 0.0, "identity"),
        naturalness=nat.reference_statistics(net, test_images, seed=0, draws=2),
    )
    save_checkpoint(path, net, info)
    return path


@pytest.fixture(scope="module")
def tiny_features(tmp_path_factory) -> NaturalnessOptions:
    return NaturalnessOptions(features=str(write_feature_network(tmp_path_factory.mktemp("features") / "f.pt")))


def test_real_images_score_near_the_floor_and_noise_near_the_ceiling(tiny_features):
    network = nat.load_feature_network(Path(str(tiny_features.features)))
    assert network.reference.shape == (400 - 90, 32) and network.ceiling > 50 * max(abs(network.floor), 1)
    real = naturalness(blobs(90, seed=1), "mnist", tiny_features)  # the same distribution, other images
    noise = naturalness(torch.rand(90, 1, 28, 28, generator=torch.Generator().manual_seed(5)), "mnist", tiny_features)
    assert abs(real.kid - real.floor) < 0.05 * real.ceiling
    assert abs(noise.kid - noise.ceiling) < 0.1 * noise.ceiling
    assert real.kid_std > 0 and real.text().startswith("KID ") and "(real " in real.text()


def test_the_same_images_always_get_the_same_number_and_the_global_generator_is_untouched(tiny_features):
    images = blobs(30, seed=2)
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = naturalness(images, "mnist", tiny_features)
    assert torch.equal(torch.rand(3), expected_next)
    assert naturalness(images, dataset_info("mnist"), tiny_features) == first


def test_unavailable_cases_say_why(tiny_features, tmp_path):
    folder = DatasetInfo("my_shapes", (1, 28, 28), ("a", "b"), "shapes", False, source=f"folder:{tmp_path}")
    with pytest.raises(NaturalnessUnavailable, match=r"no feature network for dataset 'my_shapes'.*naturalness\.fe"):
        naturalness(blobs(10, 0), folder)
    text, record = nat.summarise(blobs(10, 0), folder)
    assert text == "KID unavailable" and not record["available"] and "purpose: features" in record["reason"]
    with pytest.raises(NaturalnessUnavailable, match="at least 2 images, got 1"):
        naturalness(blobs(1, 0), "mnist", tiny_features)
    text, record = nat.summarise(torch.empty(0), "mnist", tiny_features)
    assert text == "KID unavailable" and record == {
        "available": False,
        "reason": "KID needs at least 2 images, got 0",
        "n_images": 0,
    }
    missing = NaturalnessOptions(features=str(tmp_path / "none.pt"))
    with pytest.raises(NaturalnessUnavailable, match="no feature network at"):
        naturalness(blobs(10, 0), "mnist", missing)
    assert nat.summarise(blobs(10, 0), "mnist", NaturalnessOptions(measure=False))[0] == ""


def test_a_classifier_or_another_datasets_network_is_refused(tmp_path):
    classifier = tmp_path / "classifier.pt"
    kwargs = {"image_shape": [1, 28, 28], "hidden": 8}
    info = CheckpointInfo("vgg", "tiny_mlp", kwargs, "mnist", Calibration(1.0, 0.0, "identity"))
    save_checkpoint(classifier, create_arch("tiny_mlp", **kwargs), info)
    with pytest.raises(UserError, match="without reference features, not a feature network"):
        naturalness(blobs(10, 0), "mnist", NaturalnessOptions(features=str(classifier)))
    other = NaturalnessOptions(features=str(write_feature_network(tmp_path / "other.pt", dataset="cifar10")))
    with pytest.raises(UserError, match="feature network of 'cifar10', not of 'mnist'"):
        naturalness(blobs(10, 0), "mnist", other)
    with pytest.raises(UserError, match=r"images of shape \(10, 3, 28, 28\)"):
        naturalness(
            torch.rand(10, 3, 28, 28),
            "mnist",
            NaturalnessOptions(features=str(write_feature_network(tmp_path / "m.pt"))),
        )


def test_feature_networks_are_never_models_of_a_pair(tmp_path):
    assert "features_mnist" not in register_model_options()  # conf/model/features/ is not a model_a option
    write_feature_network(feature_network_path("mnist", tmp_path))
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "vgg.pt").write_bytes(b"")
    assert list(list_checkpoints(tmp_path)) == ["vgg"]


def test_the_summary_line_and_the_run_record_show_kid(tmp_path, tiny_features, capsys):
    overrides = [
        *tiny_abs_vgg_overrides(tmp_path / "checkpoints"),
        "synthesis.classes=[0,1,2]",
        "synthesis.max_steps=3",
        "synthesis.threshold=0.01",
        "progress=false",
        f"naturalness.features={tiny_features.features}",
    ]
    run_task("synthesize", overrides, tmp_path / "run")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    record = json.loads((tmp_path / "run" / nat.NATURALNESS_NAME).read_text())
    assert record["available"] and record["n_images"] == 6 and record["subset_size"] == 6
    assert f"KID {round(record['kid_x1000'])} (real {round(record['floor_x1000'])}, noise " in line
    run_task("synthesize", overrides, tmp_path / "run")  # a resumed run with nothing left recomputes the same
    assert json.loads((tmp_path / "run" / nat.NATURALNESS_NAME).read_text()) == record


def test_the_overview_shows_each_pairs_kid_or_why_not(tmp_path, tiny_features):
    sweep = make_sweep(tmp_path / "sweep")  # two pairs of 90 uniform-noise PNGs
    rows = overview.collect_rows(overview.pair_manifests(sweep), sweep / "overview")
    measured = overview.pair_naturalness(rows, sweep / "overview", dataset_info("mnist"), tiny_features)
    network = nat.load_feature_network(Path(str(tiny_features.features)))
    assert all(abs(m.kid - network.ceiling) < 0.1 * network.ceiling for m in measured.values())
    measured[("kde", "vgg")] = NaturalnessUnavailable("KID needs at least 2 images, got 0")
    table = overview.naturalness_markdown(measured, dataset_info("mnist"))
    assert f"(real test images score {network.floor:.1f}, uniform noise {network.ceiling:.0f})" in table
    assert f"| abs vs vgg | {measured[('abs', 'vgg')].kid:.0f} +- " in table
    assert "| kde vs vgg | unavailable: KID needs at least 2 images, got 0 |" in table


@pytest.mark.data
@pytest.mark.parametrize("dataset", ["mnist", "cifar10"])
def test_the_bundled_networks_put_real_test_images_at_the_floor_and_noise_at_the_ceiling(dataset):
    from controversial.data import load_uint8
    from controversial.datasets import default_data_root

    images, _ = load_uint8(dataset, "test", default_data_root(), download=False)
    network = nat.load_feature_network(feature_network_path(dataset))
    assert network.reference.shape == (nat.REFERENCE_IMAGES, 128) and network.floor < 0.05 * network.ceiling
    real = naturalness(images[::111][:90].float() / 255, dataset)  # every class (the CIFAR-10 copy is by class)
    noise = naturalness(torch.rand((90, *images.shape[1:]), generator=torch.Generator().manual_seed(1)), dataset)
    assert abs(real.kid - real.floor) < 0.05 * real.ceiling and abs(noise.kid - noise.ceiling) < 0.1 * noise.ceiling


@pytest.mark.data
def test_a_set_of_fewer_classes_has_its_own_floor_above_the_stored_one():
    network = nat.load_feature_network(feature_network_path("mnist"))
    every_class = nat.classes_floor("mnist", list(range(10)), 90)
    assert abs(every_class - network.floor) < 0.02 * network.ceiling  # the stored floor, outside the reference
    floors = [nat.classes_floor("mnist", list(range(k)), 90) for k in (5, 2, 1)]
    assert every_class < floors[0] < floors[1] < floors[2]  # the fewer the classes, the farther from the reference
    with pytest.raises(UserError, match="fewer than 5000 test images"):
        nat.classes_floor("mnist", [0], 5000)


@pytest.mark.data
def test_train_py_writes_a_feature_network_with_its_reference_statistics(tmp_path):
    from helpers import train_in

    (tmp_path / "conf" / "model" / "features").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "features" / "tiny.yaml").write_text(
        "name: features_tiny\ndataset: mnist\npurpose: features\narch: tiny_mlp\n"
        "arch_kwargs: {image_shape: [1, 28, 28], hidden: 32}\n"
        "train: {method: supervised, epochs: 1, batch_size: 512, lr: 0.01, max_shift: 0, seed: 0}\n"
    )
    path = train_in(tmp_path, ["model=features/tiny"])
    assert path == feature_network_path("mnist", tmp_path / "models") and not (tmp_path / "models" / "mnist").exists()
    network = nat.load_feature_network(path)
    assert network.reference.shape == (nat.REFERENCE_IMAGES, 32) and network.floor < 0.05 * network.ceiling
    assert list_checkpoints(tmp_path / "models") == {}  # a feature network is not a model of a pair
