"""Per-participant order: everything once, repeats after their first showing, checks spread out."""

from __future__ import annotations

import random

from controversial.records.study import TrialSpec
from controversial.study.order import participant_order


def _trials(n=100, repeats=20, checks=4):
    trials = [TrialSpec(f"s{i}", "stimulus", 0) for i in range(n)]
    trials += [TrialSpec(f"s{i}", "stimulus", 1) for i in range(repeats)]
    trials += [TrialSpec(f"a{i}", "attention", 0) for i in range(checks)]
    return trials + [TrialSpec("d0", "demo", 0)]


def test_every_non_demo_trial_exactly_once():
    trials = _trials()
    for seed in range(20):
        order = participant_order(trials, random.Random(seed))
        assert sorted(order, key=repr) == sorted([t for t in trials if t.kind != "demo"], key=repr)


def test_repeats_come_after_their_first_showing_with_a_gap():
    for seed in range(20):
        order = participant_order(_trials(), random.Random(seed), min_repeat_gap=10)
        where = {(t.stimulus_id, t.image_repetition): i for i, t in enumerate(order)}
        for i in range(20):
            assert where[(f"s{i}", 1)] - where[(f"s{i}", 0)] > 10


def test_attention_checks_are_spread_over_the_session():
    order = participant_order(_trials(), random.Random(0))
    positions = [i for i, t in enumerate(order) if t.kind == "attention"]
    quarter = len(order) / 4
    assert [int(p // quarter) for p in positions] == [0, 1, 2, 3]
    assert positions[0] > 0


def test_orders_differ_between_participants_but_are_reproducible_per_seed():
    trials = _trials()
    assert participant_order(trials, random.Random(1)) == participant_order(trials, random.Random(1))
    assert participant_order(trials, random.Random(1)) != participant_order(trials, random.Random(2))
