"""Selection: the paper's balance, optimality of the MILP, seeds, orientation pooling, clear errors."""

from __future__ import annotations

from collections import Counter
from itertools import permutations

import numpy as np
import pytest
from helpers import make_run, make_sweep
from scipy.optimize import linear_sum_assignment

from controversial.study.selection import (
    SelectionError,
    balanced_cells,
    best_per_cell,
    collect_sweep,
    select_controversial,
    select_natural,
    select_repeats,
)


def test_each_class_is_each_models_target_n_over_10_times(tmp_path):
    chosen = select_controversial(collect_sweep(make_sweep(tmp_path)), per_pair=20)
    assert len(chosen) == 40
    for pair in {s.pair for s in chosen}:
        rows = [s.row for s in chosen if s.pair == pair]
        assert len(rows) == 20
        assert Counter(r.class_a for r in rows) == {c: 2 for c in range(10)}
        assert Counter(r.class_b for r in rows) == {c: 2 for c in range(10)}
        assert len({(r.class_a, r.class_b) for r in rows}) == 20  # one stimulus per cell


def test_milp_reaches_the_assignment_optimum(tmp_path):
    # With N=10 every class is each model's target once: a permutation without fixed points,
    # i.e. a linear assignment problem that the Hungarian algorithm solves exactly.
    stimuli = collect_sweep(make_sweep(tmp_path, pairs=(("abs", "vgg"),), seed=3))
    scores = np.full((10, 10), -1e6)
    for s in stimuli:
        scores[s.row.class_a, s.row.class_b] = s.row.hard_score
    rows, cols = linear_sum_assignment(scores, maximize=True)
    chosen = select_controversial(stimuli, per_pair=10)
    assert sum(s.row.hard_score for s in chosen) == pytest.approx(scores[rows, cols].sum(), abs=1e-9)


def test_best_seed_per_cell_and_rejected_rows_ignored(tmp_path):
    rng = np.random.default_rng(0)
    rows = make_run(tmp_path / "abs_vs_vgg", "abs", "vgg", rng, seeds=3, accept_rate=0.8)
    chosen = select_controversial(collect_sweep(tmp_path), per_pair=10)
    best = {}
    for r in rows:
        if r.accepted:
            best[(r.class_a, r.class_b)] = max(best.get((r.class_a, r.class_b), 0.0), r.hard_score)
    assert all(s.row.accepted for s in chosen)
    assert all(s.row.hard_score == best[(s.row.class_a, s.row.class_b)] for s in chosen)


def test_design_candidates_are_every_accepted_cells_best_seed(tmp_path):
    rng = np.random.default_rng(0)
    rows = make_run(tmp_path / "abs_vs_vgg", "abs", "vgg", rng, seeds=3, accept_rate=0.8)
    rows += make_run(tmp_path / "kde_vs_vgg", "kde", "vgg", rng, seeds=3, accept_rate=0.8)
    best: dict = {}
    for r in rows:
        if r.accepted:
            key = (r.model_a, r.class_a, r.class_b)
            best[key] = max(best.get(key, 0.0), r.hard_score)
    candidates = best_per_cell(collect_sweep(tmp_path))
    assert len(candidates) == len(best)
    assert all(s.row.hard_score == best[(s.row.model_a, s.row.class_a, s.row.class_b)] for s in candidates)
    assert [s.pair for s in candidates] == sorted(s.pair for s in candidates)


def test_more_seeds_per_cell_add_each_cells_next_best_accepted_seeds_after_its_best(tmp_path):
    rng = np.random.default_rng(1)
    rows = make_run(tmp_path / "abs_vs_vgg", "abs", "vgg", rng, seeds=3, accept_rate=0.8)
    accepted: dict = {}
    for r in rows:
        if r.accepted:
            accepted.setdefault((r.class_a, r.class_b), []).append(r.hard_score)
    one = best_per_cell(collect_sweep(tmp_path))
    two = best_per_cell(collect_sweep(tmp_path), per_cell=2)
    by_cell: dict = {}
    for s in two:
        by_cell.setdefault((s.row.class_a, s.row.class_b), []).append(s.row.hard_score)
    assert by_cell == {cell: sorted(scores, reverse=True)[:2] for cell, scores in accepted.items()}
    assert any(len(scores) == 2 for scores in by_cell.values())  # the fixture has cells with two accepted seeds
    assert len({s.image_path for s in two}) == len(two)  # distinct images
    firsts = [s for n, s in enumerate(two) if n == 0 or two[n - 1].oriented_classes != s.oriented_classes]
    assert firsts == one  # each cell's first is the seed the paper's selection takes
    with pytest.raises(ValueError, match="per_cell must be >= 1"):
        best_per_cell(collect_sweep(tmp_path), per_cell=0)


def test_reversed_runs_of_one_pair_pool_into_one_pair(tmp_path):
    rng = np.random.default_rng(0)
    cells = {(a, b) for a in range(10) for b in range(10) if a != b}
    odd = {c for c in cells if sum(c) % 2}
    make_run(tmp_path / "abs_vs_vgg", "abs", "vgg", rng, drop=odd)  # abs-vs-vgg run: even-sum cells only
    # vgg-vs-abs run: cell (x, y) is (y, x) in abs-vs-vgg orientation; keep only those that are odd there
    make_run(tmp_path / "vgg_vs_abs", "vgg", "abs", rng, drop={(b, a) for a, b in cells - odd})
    chosen = select_controversial(collect_sweep(tmp_path), per_pair=20)
    assert {s.pair for s in chosen} == {("abs", "vgg")}
    assert Counter(s.oriented_classes[0] for s in chosen) == {c: 2 for c in range(10)}
    assert Counter(s.oriented_classes[1] for s in chosen) == {c: 2 for c in range(10)}


def test_infeasible_request_names_pair_and_class(tmp_path):
    rng = np.random.default_rng(0)
    make_run(tmp_path / "abs_vs_vgg", "abs", "vgg", rng, drop={(3, b) for b in range(10) if b not in (3, 5)})
    with pytest.raises(SelectionError, match=r"pair abs vs vgg: class '3' is model abs's target in only 1"):
        select_controversial(collect_sweep(tmp_path), per_pair=20)


def test_per_pair_must_be_a_multiple_of_the_class_count(tmp_path):
    stimuli = collect_sweep(make_sweep(tmp_path))
    with pytest.raises(SelectionError, match="multiple of 10"):
        select_controversial(stimuli, per_pair=15)
    with pytest.raises(SelectionError, match="per_pair=100: at most 90, one stimulus per ordered class pair"):
        select_controversial(stimuli, per_pair=100)


def test_missing_sweep_is_a_clear_error(tmp_path):
    with pytest.raises(SelectionError, match="no manifest.csv"):
        collect_sweep(tmp_path)


def test_natural_images_per_class_and_exclusions():
    labels = np.tile(np.arange(10), 5)
    rng = np.random.default_rng(0)
    first = select_natural(labels, 3, 10, rng)
    assert Counter(labels[first].tolist()) == {c: 3 for c in range(10)}
    second = select_natural(labels, 2, 10, rng, exclude=first)
    assert not set(first) & set(second)
    with pytest.raises(SelectionError, match="class 0 has only 0 test images, 1 needed"):
        select_natural(labels, 1, 10, rng, exclude=range(50))


def test_repeats_are_a_subset_and_bounded():
    ids = [f"id{i}" for i in range(50)]
    picked = select_repeats(ids, 42, np.random.default_rng(0))
    assert len(set(picked)) == 42 and set(picked) <= set(ids)
    with pytest.raises(SelectionError, match="n_repeats=51"):
        select_repeats(ids, 51, np.random.default_rng(0))


def test_an_overview_manifest_inside_the_sweep_does_not_double_the_stimuli(tmp_path):
    from controversial.records.manifest import write_manifest
    from controversial.records.runs import OVERVIEW_MARK
    from controversial.synthesis.sweep_overview import collect_rows, pair_manifests

    sweep = make_sweep(tmp_path)
    before = collect_sweep(sweep)
    out_dir = sweep / "overview"
    out_dir.mkdir()
    (out_dir / OVERVIEW_MARK).write_text("")  # overview.py marks its folder before it writes the manifest
    write_manifest(out_dir / "manifest.csv", collect_rows(pair_manifests(sweep, exclude=out_dir), out_dir))
    after = collect_sweep(sweep)
    assert len(after) == len(before)
    assert sorted(s.image_path for s in after) == sorted(s.image_path for s in before)


def test_balanced_cells_on_arrays_is_the_papers_selection():
    # what benchmarks/design.py uses for the paper's design: the brute-force optimum on 3 classes, one per side
    cells = [(a, b) for a in range(3) for b in range(3) if a != b]
    scores = np.array([0.9, 0.2, 0.4, 0.8, 0.7, 0.1])
    chosen = balanced_cells(cells, scores, per_class=1, classes=3)
    derangements = [p for p in permutations(range(3)) if all(p[a] != a for a in range(3))]
    best = max(sum(scores[cells.index((a, p[a]))] for a in range(3)) for p in derangements)
    assert scores[chosen].sum() == pytest.approx(best)
    assert sorted(cells[i][0] for i in chosen) == [0, 1, 2] and sorted(cells[i][1] for i in chosen) == [0, 1, 2]
    with pytest.raises(SelectionError):  # class 0 is never the first model's target
        balanced_cells([c for c in cells if c[0] != 0], scores[2:], per_class=1, classes=3)
