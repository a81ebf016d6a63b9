"""A dataset registered after import (an imported model's image folder) is read by the names, the analysis and the
simulation like a built-in one; the analysis also reads such a dataset's natural images with no registration."""

from __future__ import annotations

import pytest

from controversial.analysis.simulate import simulate_models
from controversial.datasets import DATASETS, DatasetInfo, register_dataset
from controversial.records.names import StimulusNameError, natural_filename, parse_name, stimulus_filename
from controversial.records.responses import natural_true_class

FRUIT = DatasetInfo("fruit5", (3, 8, 8), ("apple", "pear", "plum", "fig", "lime"), "Fruit5", mirror_symmetric=True)


@pytest.fixture
def fruit():
    register_dataset(FRUIT)
    yield FRUIT
    DATASETS.pop(FRUIT.name)


def test_names_of_a_registered_dataset_parse_as_its_own(fruit):
    synthetic = parse_name(stimulus_filename("res_net", "plum", "vit", "fig", 3))
    assert (synthetic.dataset, synthetic.model_a, synthetic.class_a, synthetic.class_b) == (
        "fruit5",
        "res_net",
        "plum",
        "fig",
    )
    natural = parse_name(natural_filename("fruit5", 12, "lime"))
    assert natural.filename == "Fruit5_12_lime.png" and (natural.kind, natural.true_class) == ("natural", "lime")


def test_before_registration_the_names_are_refused_and_the_analysis_reads_them_by_category():
    with pytest.raises(StimulusNameError, match="accepted"):
        parse_name("res_net_plum_vs_vit_fig_seed3.png")
    assert natural_true_class("Fruit5_12_lime", FRUIT.class_names) == "lime"
    assert natural_true_class("res_net_plum_vs_vit_fig_seed3", FRUIT.class_names) is None


def test_a_five_class_simulation_targets_two_different_classes_per_stimulus(fruit):
    simulated = simulate_models(n_models=3, dataset="Fruit5", stimuli_per_pair=10, natural_per_class=1, seed=0)
    assert simulated.categories == FRUIT.class_names
    targeted = [s for s in simulated.stimuli if s.true_class is None]
    assert len(targeted) == 3 * 10 and all(s.targeted_classes[0] != s.targeted_classes[1] for s in targeted)
