"""Stimulus file names: every name the project writes round-trips through the one parser; every known
misparse is refused with the file and the accepted patterns; the PNAS 2020 sample parses as published."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controversial.datasets import DATASETS
from controversial.records.names import (
    PNAS_MODELS,
    StimulusNameError,
    natural_controversial_filename,
    natural_filename,
    parse_name,
    project_model,
    stimulus_filename,
)

PNAS = Path(os.environ.get("CONTROVERSIAL_DATA_ROOT", "data")) / "pnas2020"
PROJECT_MODELS = {
    "mnist": ["abs", "vgg", "vgg_neg", "madry_linf", "madry_l2", "capsnet_recon", "kde", "pcn", "tiny_a"],
    "cifar10": ["vgg16", "kde_cifar10", "robust_l2", "robust_linf", "pcn_cifar10", "wrn", "jem"],
}


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_every_name_the_project_writes_round_trips(dataset):
    classes = DATASETS[dataset].class_names
    models = PROJECT_MODELS[dataset]
    for a, b in zip(models, models[1:] + models[:1]):
        for ca, cb in ((classes[0], classes[3]), (classes[9], classes[1])):
            written = stimulus_filename(a, ca, b, cb, 7)
            name = parse_name(written)
            assert (name.kind, name.model_a, name.class_a, name.model_b, name.class_b, name.seed, name.dataset) == (
                "synthetic",
                a,
                ca,
                b,
                cb,
                7,
                dataset,
            )
            assert name.filename == written and name.image == written
            natural = natural_controversial_filename(a, ca, b, cb, 1234)
            name = parse_name(natural)
            assert (name.kind, name.model_a, name.class_b, name.index) == ("natural_controversial", a, cb, "1234")
            assert name.filename == natural and name.targets() == (a, b, ca, cb)
    for index in (0, 12, 9999):
        written = natural_filename(dataset, index, classes[5])
        name = parse_name(written)
        assert (name.kind, name.true_class, name.index, name.filename) == ("natural", classes[5], str(index), written)
        assert name.targets() == ("", "", "", "")


@pytest.mark.parametrize(
    "filename, scheme",
    [
        (
            "Gaussian_KDE_airplane_vs_JEM-20_truck_repeated.png",
            "project",
        ),  # was: model 'JEM-20_truck', class 'repeated'
        ("abs_3_vs_vgg_7.png", "project"),  # no seed or natural suffix
        ("Gaussian_KDE_0_Sarasra_Capsule_1.png", "project"),  # Experiment 1: no _vs_
        ("CIFAR_10_test_000_8160_frog.png", "project"),  # Experiment 2 natural image
        ("abs_3_vs_vgg_seven_seed0.png", "project"),  # not a class
        ("holiday.png", "project"),
        ("unknown_model_3_vs_vgg_7.png", "pnas2020"),  # not a PNAS handle
        ("Gaussian_KDE_airplane_vs_JEM-20_truck_repeated.jpg", "pnas2020"),
        ("abs_3_vs_vgg_7_seed0.png", "pnas2020"),  # the project's names are not the release's
    ],
)
def test_unreadable_names_are_errors_naming_file_and_patterns(filename, scheme):
    with pytest.raises(StimulusNameError, match=rf"^{filename.replace('.', '[.]')}: not a stimulus name .*accepted: "):
        parse_name(filename, scheme)


def test_known_misparses_now_read_correctly():
    repeated = parse_name("Gaussian_KDE_airplane_vs_JEM-20_truck_repeated.png", "pnas2020")
    assert repeated.targets() == ("Gaussian_KDE", "JEM-20", "airplane", "truck") and repeated.repeated
    assert repeated.image == "Gaussian_KDE_airplane_vs_JEM-20_truck"  # the same image as its first presentation
    natural = parse_name("abs_3_vs_vgg_7_natural12.png")
    assert natural.targets() == ("abs", "vgg", "3", "7") and natural.index == "12" and natural.seed is None
    exp1 = parse_name("Gaussian_KDE_0_Sarasra_Capsule_1.png", "pnas2020")
    assert exp1.targets() == ("Gaussian_KDE", "Sarasra_Capsule", "0", "1") and exp1.dataset == "mnist"
    underscores = parse_name("small_VGG_negative_3_Sarasra_Normalized_Reconstruction_5.png", "pnas2020")
    assert underscores.targets() == ("small_VGG_negative", "Sarasra_Normalized_Reconstruction", "3", "5")
    variant = parse_name("Saarasra_Normalized_Reconstruction_3_madry_l2_5.png", "pnas2020")
    assert project_model(variant.model_a, "mnist") == "capsnet_recon"
    dotted = parse_name("Wen_PCN_A6_cat_vs_robustness_resnet50_l2_1.0_airplane_repeated.png", "pnas2020")
    assert dotted.model_b == "robustness_resnet50_l2_1.0" and dotted.class_b == "airplane"
    cifar = parse_name("CIFAR_10_test_003_015_ship.png", "pnas2020")
    assert (cifar.kind, cifar.index, cifar.test_index, cifar.true_class) == ("natural", "003", "015", "ship")


def test_handles_map_to_project_models():
    assert project_model("Gaussian_KDE", "mnist") == "kde" and project_model("Gaussian_KDE", "cifar10") == "kde_cifar10"
    assert project_model("JEM-dscrmntv", "cifar10") == "wrn" and project_model("schott_VAE", "mnist") == "abs"
    assert len(set(PNAS_MODELS["mnist"].values())) == 9 and len(set(PNAS_MODELS["cifar10"].values())) == 7
    with pytest.raises(StimulusNameError, match="'JEM-20' is not a PNAS 2020 model handle for mnist; known: small_VGG"):
        project_model("JEM-20", "mnist")


@pytest.mark.data
@pytest.mark.parametrize(
    "folder, dataset, counts",
    [
        ("experiment_1_sample", "mnist", {"natural": 100, "synthetic": 40}),
        ("experiment_2_sample", "cifar10", {"natural": 60, "synthetic": 44}),
    ],
)
def test_the_pnas_sample_parses_as_published(folder, dataset, counts):
    files = sorted((PNAS / folder).glob("*.png"))
    if not files:
        pytest.skip(f"{PNAS / folder} not found (set CONTROVERSIAL_DATA_ROOT)")
    names = [parse_name(f.name, "pnas2020") for f in files]
    assert all(n.filename == f.name and n.dataset == dataset for n, f in zip(names, files))
    assert {k: sum(n.kind == k for n in names) for k in counts} == counts
    for n in names:
        if n.controversial:
            project_model(n.model_a, dataset), project_model(n.model_b, dataset)
