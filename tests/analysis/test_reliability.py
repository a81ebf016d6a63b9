"""Reliability of the human ratings (METHODS.md section 8; issue 60, item 7): test-retest per participant and
pooled on the repeated presentations, split-half with Spearman-Brown, in ``report.md`` and ``results.json``."""

from __future__ import annotations

import csv
import itertools
import json

import numpy as np
import pytest
from helpers import ANALYZE_SMALL as SMALL
from helpers import run_analyze

from controversial.analysis.reliability import retest_reliability, split_half


def test_split_half_of_two_participants_is_their_spearman_brown_r():
    rng = np.random.default_rng(0)
    human = rng.random((2, 5, 3))
    r = np.corrcoef(human[0].ravel(), human[1].ravel())[0, 1]
    result = split_half(human, n_splits=20, seed=1, ci_level=0.9)
    assert result.mean == pytest.approx(2 * r / (1 + r)) and result.ci_low == pytest.approx(result.ci_high)


def test_split_half_matches_a_loop_over_every_split():
    """Four participants: the random splits visit the 3 distinct halvings; each gives the loop's value."""
    rng = np.random.default_rng(2)
    human = rng.random((4, 6, 2)) + np.linspace(0, 1, 12).reshape(1, 6, 2)
    expected = set()
    for half in itertools.combinations(range(4), 2):
        rest = [p for p in range(4) if p not in half]
        r = np.corrcoef(human[list(half)].mean(0).ravel(), human[rest].mean(0).ravel())[0, 1]
        expected.add(round(2 * r / (1 + r), 9))
    result = split_half(human, n_splits=400, seed=0, ci_level=0.95)
    assert min(expected) - 1e-9 <= result.ci_low <= result.mean <= result.ci_high <= max(expected) + 1e-9
    assert result.mean == pytest.approx(np.mean(sorted(expected)), abs=0.05)  # splits roughly equally often


def test_test_retest_per_participant_and_pooled():
    first = np.array([0.0, 0.25, 1.0, 0.5])
    pairs = {"a": (first, first.copy()), "b": (first, first[::-1].copy()), "c": (first, np.full(4, 0.5))}
    result = retest_reliability(pairs, ["a", "b", "c", "gone"], n_categories=2)
    assert result.per_participant["a"] == pytest.approx(1.0)
    assert result.per_participant["b"] == pytest.approx(np.corrcoef(first, first[::-1])[0, 1])
    assert np.isnan(result.per_participant["c"])  # constant second ratings: undefined, left out of the median
    assert result.median == pytest.approx(np.median([1.0, np.corrcoef(first, first[::-1])[0, 1]]))
    pooled = np.corrcoef(np.tile(first, 3), np.concatenate([first, first[::-1], np.full(4, 0.5)]))[0, 1]
    assert result.pooled == pytest.approx(pooled) and result.n_participants == 3 and result.n_repeated_images == 2


@pytest.mark.slow
def test_the_report_and_results_json_state_both_reliabilities(tmp_path):
    first = run_analyze(tmp_path / "sim", SMALL + ["figures=false"])
    human, model = first.inputs.human_ratings, first.inputs.model_responses
    with open(human, newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    column = {name: i for i, name in enumerate(header)}
    repeated_images = sorted({r[column["image"]] for r in body})[:3]
    rng = np.random.default_rng(0)
    repeats = []
    for r in body:
        if r[column["image"]] in repeated_images:
            again = list(r)
            again[column["image_repetition"]] = "1"
            noisy = float(r[column["category_rating"]]) + rng.choice([-0.25, 0, 0.25])
            again[column["category_rating"]] = str(min(1.0, max(0.0, noisy)))
            repeats.append(again)
    with_repeats = tmp_path / "with_repeats.csv"
    with open(with_repeats, "w", newline="") as handle:
        csv.writer(handle).writerows([header, *body, *repeats])
    results = run_analyze(
        tmp_path / "b", SMALL + [f"human_ratings={with_repeats}", f"model_responses={model}", "figures=false"]
    )
    block = results.reliability["study"]
    participant = "sim_participant_01"
    mine = [r for r in body if r[column["subject"]] == participant and r[column["image"]] in repeated_images]
    theirs = [r for r in repeats if r[column["subject"]] == participant]
    key = lambda r: (r[column["image"]], r[column["response_category"]])  # noqa: E731
    x = [float(r[column["category_rating"]]) for r in sorted(mine, key=key)]
    y = [float(r[column["category_rating"]]) for r in sorted(theirs, key=key)]
    assert block.test_retest.per_participant[participant] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert block.test_retest.n_participants == 6 and block.test_retest.n_repeated_images == 3
    assert 0 < block.split_half.mean < 1 and block.split_half.n_splits == 1000
    saved = json.loads((tmp_path / "b" / "results.json").read_text())["reliability"]["study"]
    assert saved["test_retest"]["per_participant"][participant] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert saved["split_half"]["mean"] == pytest.approx(block.split_half.mean)
    report = (tmp_path / "b" / "report.md").read_text()
    assert "## Reliability of the human ratings" in report and f"{block.split_half.mean:.3f}" in report
    assert f"{block.test_retest.median:.3f}" in report and f"{participant} " in report.split("per participant")[1]
