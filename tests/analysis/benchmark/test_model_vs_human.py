"""The model-vs-human raw data as published: every format variant on synthetic files, and the real
sample (data-marked) against the benchmark's own formula (bethgelab/model-vs-human,
``modelvshuman/plotting/analyses.py`` ``ErrorConsistency`` and ``helper/plotting_helper.py``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

from controversial.analysis import error_consistency as ec
from controversial.records.choices import read_trials, stimulus_identity
from controversial.records.csvfile import InputError

RAW = Path(os.environ.get("CONTROVERSIAL_DATA_ROOT", "data")) / "model-vs-human" / "raw-data"
HEADER = "subj,{session},trial,rt,object_response,category,condition,imagename\n"


def write(path: Path, rows: list[str], session: str = "session") -> Path:
    path.write_text(HEADER.format(session=session) + "".join(r + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    "imagename, identity",
    [
        ("0001_s5n_s01_0_bird_00_bird3-bird2.png", "bird3-bird2.png"),
        ("0001_rot_s01_0_chair_20_n03376595_3070.png", "n03376595_3070.png"),
        ("0000_cl_s01_bw_boat_40_n02951358_5952.JPEG", "n02951358_5952.JPEG"),
        ("airplane1-bicycle2.png", "airplane1-bicycle2.png"),
    ],
)
def test_stimulus_identity_is_the_benchmarks_rule(imagename, identity):
    assert stimulus_identity(imagename) == identity


def test_prefixed_names_capital_session_and_missed_trials(tmp_path):
    a = write(
        tmp_path / "a.csv",
        [
            "subject-01,1,1,0.5,dog,dog,0,0001_x_s01_0_dog_00_dog1.png",
            "subject-01,1,2,0.5,na,cat,0,0002_x_s01_0_cat_00_cat1.png",
        ],
        session="Session",
    )
    b = write(
        tmp_path / "b.csv",
        [
            "subject-02,1,1,0.5,cat,cat,0,0001_x_s02_0_cat_00_cat1.png",
            "subject-02,1,2,0.5,dog,dog,0,0002_x_s02_0_dog_00_dog1.png",
        ],
    )
    trials = read_trials([a, b])
    assert trials[1].response is None  # "na": a missed trial
    data = ec.decisions_from_trials(trials)
    assert data.images == ("dog1.png", "cat1.png") and data.available.all()
    np.testing.assert_array_equal(data.correct, [[True, False], [True, True]])


def test_model_file_with_empty_condition_takes_the_humans(tmp_path):
    human = write(
        tmp_path / "h.csv",
        [
            "subject-01,1,1,0.5,dog,dog,c1,0001_x_s01_c1_dog_00_dog1.png",
            "subject-01,1,2,0.5,dog,cat,c2,0002_x_s01_c2_cat_00_cat1.png",
        ],
    )
    model = write(
        tmp_path / "m.csv",
        ["resnet,1,1,,dog,dog,,0001_x_resnet_dog_00_dog1.png", "resnet,1,2,,cat,cat,NaN,0002_x_resnet_cat_00_cat1.png"],
    )
    data = ec.decisions_from_trials(read_trials([human, model]))
    assert list(data.conditions) == ["c1", "c2"]


def test_observers_sharing_no_trial_are_an_error_naming_both_files(tmp_path):
    a = write(tmp_path / "a.csv", ["s1,1,1,0.5,dog,dog,0,0001_x_s01_0_dog_00_dog1.png"])
    b = write(tmp_path / "b.csv", ["s2,1,1,0.5,dog,dog,0,0001_x_s02_0_dog_00_dog2.png"])
    with pytest.raises(InputError, match=r"observers 's1' \(.*a\.csv\) and 's2' \(.*b\.csv\) share no stimulus"):
        ec.decisions_from_trials(read_trials([a, b]))


def test_conflicting_conditions_are_an_error(tmp_path):
    a = write(tmp_path / "a.csv", ["s1,1,1,0.5,dog,dog,c1,0001_dog1.png"])
    b = write(tmp_path / "b.csv", ["s2,1,1,0.5,dog,dog,c2,0009_dog1.png"])
    with pytest.raises(InputError, match=r"b\.csv, row 2, column 'condition': stimulus 'dog1\.png' has condition 'c2'"):
        ec.decisions_from_trials(read_trials([a, b]))


# --- the benchmark's formula, written out independently: one pair at a time, trials sorted by identity ---


def benchmark_kappa(rows_1: list[tuple[str, bool]], rows_2: list[tuple[str, bool]]) -> float:
    """ErrorConsistency.analysis: accuracies over each observer's trials, c_obs over identity-sorted trials,
    and 1.0 whenever c_obs is 1."""
    assert len(rows_1) == len(rows_2)
    one, two = sorted(rows_1), sorted(rows_2)
    assert [k for k, _ in one] == [k for k, _ in two]
    p1 = sum(c for _, c in one) / len(one)
    p2 = sum(c for _, c in two) / len(two)
    expected = p1 * p2 + (1 - p1) * (1 - p2)
    observed = sum(a == b for (_, a), (_, b) in zip(one, two)) / len(one)
    return 1.0 if observed == 1.0 else (observed - expected) / (1 - expected)


def benchmark_values(trials) -> tuple[dict, dict]:
    """(whole dataset, per condition then averaged) kappa per unordered pair of observers."""
    by = {}
    for t in trials:
        by.setdefault(t.subject, []).append((t.stimulus, t.condition, t.response == t.category))
    whole, per = {}, {}
    for s1, s2 in itertools.combinations(sorted(by), 2):
        whole[s1, s2] = benchmark_kappa([(k, c) for k, _, c in by[s1]], [(k, c) for k, _, c in by[s2]])
        conditions = sorted({c for _, c, _ in by[s1]})
        per[s1, s2] = float(
            np.mean(
                [
                    benchmark_kappa(
                        [(k, c) for k, cond, c in by[s1] if cond == x], [(k, c) for k, cond, c in by[s2] if cond == x]
                    )
                    for x in conditions
                ]
            )
        )
    return whole, per


@pytest.mark.data
@pytest.mark.parametrize(
    "dataset", ["colour", "contrast", "cue-conflict", "edge", "rotation", "silhouette", "sketch", "stylized"]
)
def test_published_data_equal_the_benchmarks_formula(dataset):
    folder = RAW / dataset
    if not folder.is_dir():
        pytest.skip(f"{folder} not found (set CONTROVERSIAL_DATA_ROOT)")
    trials = read_trials(sorted(folder.glob("*.csv")))
    data = ec.decisions_from_trials(trials)
    whole, per = benchmark_values(trials)
    index = {n: i for i, n in enumerate(data.names)}
    for aggregation, reference in (("whole", whole), ("per_condition", per)):
        kappa = ec.consistency(data, aggregation, c_exp_one="one").kappa
        for (s1, s2), value in reference.items():
            assert kappa[index[s1], index[s2]] == pytest.approx(value, abs=1e-9), (aggregation, s1, s2)


@pytest.mark.data
def test_cue_conflict_mean_human_kappa_is_the_papers():
    folder = RAW / "cue-conflict"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found (set CONTROVERSIAL_DATA_ROOT)")
    data = ec.decisions_from_trials(read_trials(sorted(folder.glob("*.csv"))))
    kappa = ec.consistency(data, "whole").kappa
    assert len(data.names) == 10 and data.correct.shape[1] == 1280
    assert np.mean(kappa[np.triu_indices(10, k=1)]) == pytest.approx(0.331, abs=5e-4)
