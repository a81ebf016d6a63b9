"""The benchmark's candidate pool: synthesised per model pair and cell, saved, read back, as the optimiser sees it."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fake_mnist_test, write_tiny_checkpoints

from controversial.design.constraints import DesignConstraints, check_design
from controversial.design.pool import CandidatePool, best_seed_per_cell, pair_cells, synthesize_pool
from controversial.zoo.checkpoints import load_checkpoint

MODELS = ("abs", "kde", "vgg")


@pytest.fixture(scope="module")
def tiny_pool(tmp_path_factory) -> CandidatePool:  # type: ignore[no-untyped-def]
    folder = write_tiny_checkpoints(tmp_path_factory.mktemp("models"), MODELS, "mnist")
    models = [load_checkpoint(folder / f"{name}.pt") for name in MODELS]
    images, labels = fake_mnist_test("mnist", n_per_class=3)
    return synthesize_pool(
        models, images, labels, offsets=(1, 5), seeds_per_cell=2, max_steps=2, natural_per_class=2, report=str
    )


def test_every_cell_of_every_pair_is_synthesised_per_seed_and_rated_by_every_model(tiny_pool):
    n_synthetic = 3 * 20 * 2  # pairs x cells x seeds
    assert tiny_pool.models == MODELS
    assert tiny_pool.probabilities.shape == (3, n_synthetic + 20, 10)
    assert (tiny_pool.source == "synthetic").sum() == n_synthetic and (tiny_pool.source == "natural").sum() == 20
    assert np.bincount(tiny_pool.true_class[tiny_pool.source == "natural"]).tolist() == [2] * 10
    assert tiny_pool.images.dtype == np.uint8 and tiny_pool.images.shape == (n_synthetic + 20, 1, 28, 28)
    first = (tiny_pool.seed == 0) & (tiny_pool.pairs == [0, 1]).all(axis=1)
    assert [tuple(c) for c in tiny_pool.classes[first]] == pair_cells((1, 5))
    # the paper's kind of design sees each cell's best seed and every natural image
    assert tiny_pool.plain().sum() == n_synthetic // 2 + 20


def test_a_saved_pool_reads_back_and_gives_the_optimiser_a_pool_with_the_paper_budget(tiny_pool, tmp_path):
    tiny_pool.save(tmp_path / "pool.npz")
    again = CandidatePool.load(tmp_path / "pool.npz")
    assert again.models == tiny_pool.models
    assert np.array_equal(again.probabilities, tiny_pool.probabilities)
    assert np.array_equal(again.hard, tiny_pool.hard, equal_nan=True)
    pool = again.design_pool()
    assert sorted(set(pool.conditions)) == ["abs|kde", "abs|vgg", "kde|vgg", "natural"]
    chosen = np.flatnonzero(again.plain() & (again.source == "synthetic"))
    natural = [int(np.flatnonzero(again.true_class == c)[0]) for c in range(10)]
    constraints = DesignConstraints(n_stimuli=len(chosen) + 10, natural_per_class=1)
    assert check_design(pool, constraints, [*chosen.tolist(), *natural]) == []


def test_the_best_seed_of_a_cell_is_its_most_controversial_the_first_on_ties():
    pairs = np.array([[0, 1]] * 4 + [[-1, -1]])
    targets = np.array([[2, 3], [2, 3], [2, 3], [4, 5], [-1, -1]])
    hard = np.array([0.8, 0.9, 0.9, 0.1, np.nan])
    best = best_seed_per_cell(pairs, targets, hard, np.array([True] * 4 + [False]))
    assert best.tolist() == [False, True, False, True, False]


def test_offsets_must_start_with_the_papers_balanced_cells():
    with pytest.raises(ValueError, match="start with 1 5"):
        pair_cells((3, 1))
