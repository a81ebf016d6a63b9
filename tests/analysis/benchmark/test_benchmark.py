"""The model-vs-human benchmark's five numbers on hand-made raw files, every value worked out by hand (the
arithmetic is in the comments), the ranking rule, the shape-bias rule, and (data-marked) the published human
files with one observer relabelled as a model against an independent loop."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from controversial.analysis.benchmark.scores import (
    HUMANS,
    OVERALL,
    BenchmarkOptions,
    BenchmarkRow,
    condition_order,
    dataset_benchmark,
    dataset_rows,
    overall_rows,
    rank_models,
    run_benchmark,
)
from controversial.analysis.benchmark.shape_bias import shape_bias
from controversial.analysis.error_consistency import decisions_from_trials
from controversial.records.choices import read_trials
from controversial.records.csvfile import InputError

RAW = Path(os.environ.get("CONTROVERSIAL_DATA_ROOT", "data")) / "model-vs-human" / "raw-data"
HEADER = "subj,session,trial,rt,object_response,category,condition,imagename\n"

# correct (1) / wrong (0) on trials t1..t4 (condition c1) and t5..t8 (condition c2)
PATTERNS = {
    "subject-01": "1100" + "1111",
    "subject-02": "1010" + "1100",
    "subject-03": "1110" + "0101",
    "model": "1101" + "1000",
}


def write_observer(folder: Path, name: str, pattern: str, extra: str = "") -> Path:
    """One raw-data file: trial k shows dog<k>.png (true class dog); a wrong answer says cat."""
    rows = []
    for k, bit in enumerate(pattern + extra, start=1):
        condition = "c1" if k <= 4 else "c2" if k <= 8 else "c0"
        answer = "dog" if bit == "1" else "cat"
        rows.append(f"{name},1,{k},0.5,{answer},dog,{condition},{k:04d}_x_{name}_{condition}_dog_00_dog{k}.png")
    path = folder / f"{name}.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    return path


def hand_dataset(tmp_path: Path, extra: dict[str, str] | None = None):
    files = [write_observer(tmp_path, n, p, (extra or {}).get(n, "")) for n, p in PATTERNS.items()]
    data = decisions_from_trials(read_trials(files))
    return data, [n.startswith("subject") for n in data.names]


def test_five_numbers_by_hand(tmp_path):
    data, is_human = hand_dataset(tmp_path)
    block = dataset_benchmark("toy", data, is_human)
    m, h1, h2, h3 = (block.names.index(n) for n in ("model", "subject-01", "subject-02", "subject-03"))
    # accuracies c1 / c2: h1 .5/1, h2 .5/.5, h3 .75/.5, model .75/.25
    assert block.ood_accuracy[m] == pytest.approx(0.5)
    assert block.ood_accuracy[h1] == pytest.approx(0.75)
    # A(model): h1 (.0625 + .5625)/2, h2 (.0625 + .0625)/2, h3 (0 + .0625)/2 -> mean .40625/3
    assert block.accuracy_difference[m] == pytest.approx(0.40625 / 3)
    # c_obs c1: h1 .75, h2 .25, h3 .5; c2: h1 .25, h2 .75, h3 .25 -> per human .5, .5, .375
    assert block.observed_consistency[m] == pytest.approx(1.375 / 3)
    # kappa c1: h1 .5, h2 -.5, h3 -1/3; c2: h1 0, h2 .5, h3 -.5 -> per human .25, 0, -5/12
    assert block.error_consistency[m] == pytest.approx((0.25 + 0 - 5 / 12) / 3)
    # humans against the other humans; kappa c1: h1-h2 0, h1-h3 .5, h2-h3 .5; c2: 0, 0, 0
    # A(h1) = (.125 + .15625)/2, E(h1) = (0 + .25)/2, E(h2) = (0 + .25)/2, E(h3) = (.25 + .25)/2
    assert block.accuracy_difference[h1] == pytest.approx(0.140625)
    assert block.accuracy_difference[h2] == pytest.approx(0.078125)
    assert block.accuracy_difference[h3] == pytest.approx(0.09375)
    assert block.observed_consistency[h1] == pytest.approx(0.5625)
    assert [block.error_consistency[i] for i in (h1, h2, h3)] == pytest.approx([0.125, 0.125, 0.25])
    assert block.human_baseline["accuracy_difference"] == pytest.approx(0.3125 / 3)
    assert block.human_baseline["error_consistency"] == pytest.approx(0.5 / 3)
    rows = dataset_rows(block)
    assert [r.name for r in rows] == ["model", "subject-01", "subject-02", "subject-03", HUMANS]
    assert rows[0].mean_rank is None and rows[-1].mean_rank is None  # one model: a rank among one says nothing


def test_excluded_conditions_leave_the_numbers_but_stay_in_the_curves(tmp_path):
    data, is_human = hand_dataset(tmp_path)
    extra = {"subject-01": "10", "subject-02": "01", "subject-03": "00", "model": "11"}
    with_c0, _ = hand_dataset(tmp_path, extra)
    plain = dataset_benchmark("toy", data, is_human)
    dropped = dataset_benchmark("toy", with_c0, is_human, excluded=["c0"])
    assert dropped.excluded_conditions == ["c0"] and dropped.conditions == ["c0", "c1", "c2"]
    for metric in ("ood_accuracy", "accuracy_difference", "observed_consistency", "error_consistency"):
        assert getattr(dropped, metric) == pytest.approx(getattr(plain, metric))
    m = dropped.names.index("model")
    assert dropped.accuracy_by_condition[m] == pytest.approx([1.0, 0.75, 0.25])
    kept = dataset_benchmark("toy", with_c0, is_human)
    assert kept.ood_accuracy[m] == pytest.approx(2 / 3)  # (1 + .75 + .25) / 3


def test_one_human_is_an_error(tmp_path):
    data, _ = hand_dataset(tmp_path)
    with pytest.raises(ValueError, match=r"dataset 'toy': 1 human observer\(s\).*at least two"):
        dataset_benchmark("toy", data, [n == "subject-01" for n in data.names])


def _row(name: str, a: float, o: float, e: float) -> BenchmarkRow:
    return BenchmarkRow(name, 1, 0.5, a, o, e, None, None)


def test_ranking_is_the_mean_rank_of_a_ascending_o_and_e_descending():
    rows = rank_models(
        [
            _row("p", a=0.01, o=0.70, e=0.10),  # ranks 1, 2, 2.5 -> 11/6
            _row("q", a=0.02, o=0.80, e=0.10),  # ranks 2, 1, 2.5 -> 11/6
            _row("r", a=0.03, o=0.60, e=0.20),  # ranks 3, 3, 1 -> 7/3
            _row(HUMANS, a=0.0, o=0.9, e=0.3),
        ]
    )
    assert [(r.name, r.mean_rank) for r in rows] == [
        ("p", pytest.approx(11 / 6)),
        ("q", pytest.approx(11 / 6)),
        ("r", pytest.approx(7 / 3)),
        (HUMANS, None),
    ]


def test_overall_is_the_mean_over_the_datasets_a_model_appears_in(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, is_human = hand_dataset(tmp_path / "a")
    files = [write_observer(tmp_path / "b", n, p[::-1]) for n, p in PATTERNS.items()]
    two = decisions_from_trials(read_trials(files))
    blocks = [dataset_benchmark("a", one, is_human), dataset_benchmark("b", two, is_human)]
    rows = {r.name: r for r in overall_rows(blocks)}
    m = blocks[0].names.index("model")
    for metric in ("ood_accuracy", "accuracy_difference", "observed_consistency", "error_consistency"):
        expected = np.mean([getattr(b, metric)[m] for b in blocks])
        assert getattr(rows["model"], metric) == pytest.approx(expected)
        baseline = np.mean([b.human_baseline[metric] for b in blocks])
        assert getattr(rows[HUMANS], metric) == pytest.approx(baseline)
    assert rows["model"].datasets == 2


# --- shape bias ---


def write_cue(folder: Path, name: str, rows: list[tuple[str, str]]) -> Path:
    """rows: (image tail, response); the category is the shape in the name."""
    lines = [
        f"{name},1,{k},0.5,{response},{image.split('-')[0].rstrip('0123456789')},0,{k:04d}_cc_{name}_0_x_00_{image}"
        for k, (image, response) in enumerate(rows, start=1)
    ]
    path = folder / f"{name}.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


def test_shape_bias_drops_same_class_trials_and_other_answers(tmp_path):
    path = write_cue(
        tmp_path,
        "subject-01",
        [
            ("cat1-dog2.png", "cat"),  # shape
            ("cat2-dog1.png", "dog"),  # texture
            ("cat3-bird1.png", "cat"),  # shape
            ("cat4-cat2.png", "dog"),  # same class: dropped whatever the answer
            ("cat5-cat1.png", "cat"),  # same class: dropped
            ("bird1-cat3.png", "car"),  # neither class: in no count
            ("bird2-dog3.png", "dog"),  # texture
        ],
    )
    result = shape_bias(read_trials([path]))["subject-01"]
    assert (result.n_conflict, result.shape, result.texture) == (5, 2, 2)
    assert result.shape_bias == pytest.approx(0.5)
    assert result.per_category == {"bird": pytest.approx(0.0), "cat": pytest.approx(2 / 3)}
    assert result.cue_accuracy == pytest.approx(4 / 5)
    assert result.per_category_cue_accuracy == {"bird": pytest.approx(1 / 2), "cat": pytest.approx(1.0)}


def test_shape_bias_rejects_a_name_that_is_not_cue_conflict(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(HEADER + "s1,1,1,0.5,cat,cat,0,0001_x_s1_cat_00_n02123045_1.JPEG\n")
    with pytest.raises(InputError, match=r"s\.csv, row 2, column 'imagename'.*not a cue-conflict stimulus name"):
        shape_bias(read_trials([path]))


# --- the published files: one observer relabelled as a model, against an independent loop ---


def independent_loop(trials, model: str, excluded: set[str]) -> tuple[float, float, float]:
    """A, O, E of ``model`` written out pair by pair and condition by condition with plain Python."""
    by: dict[str, dict[str, tuple[str, bool]]] = {}
    for t in trials:
        by.setdefault(t.subject, {})[t.stimulus] = (t.condition, t.response == t.category)
    conditions = sorted({c for c, _ in by[model].values()} - excluded)
    a, o, e = [], [], []
    for human in sorted(h for h in by if h != model):
        per = []
        for c in conditions:
            shared = [s for s, (cond, _) in by[model].items() if cond == c and s in by[human]]
            x = [by[model][s][1] for s in shared]
            y = [by[human][s][1] for s in shared]
            px = sum(by[model][s][1] for s, (cond, _) in by[model].items() if cond == c) / sum(
                1 for cond, _ in by[model].values() if cond == c
            )
            py = sum(v for cond, v in by[human].values() if cond == c) / sum(
                1 for cond, _ in by[human].values() if cond == c
            )
            observed = sum(i == j for i, j in zip(x, y)) / len(x)
            qx, qy = sum(x) / len(x), sum(y) / len(y)
            expected = qx * qy + (1 - qx) * (1 - qy)
            per.append(((py - px) ** 2, observed, (observed - expected) / (1 - expected)))
        a.append(np.mean([p[0] for p in per]))
        o.append(np.mean([p[1] for p in per]))
        e.append(np.mean([p[2] for p in per]))
    return float(np.mean(a)), float(np.mean(o)), float(np.mean(e))


@pytest.mark.data
@pytest.mark.parametrize("dataset, excluded", [("contrast", {"c100", "c03", "c01"}), ("cue-conflict", set())])
def test_published_humans_with_one_relabelled_as_a_model(dataset, excluded, tmp_path):
    folder = RAW / dataset
    if not folder.is_dir():
        pytest.skip(f"{folder} not found (set CONTROVERSIAL_DATA_ROOT)")
    files = sorted(folder.glob("*.csv"))
    text = files[0].read_text().replace("subject-01,", "relabelled-model,")
    model_file = tmp_path / "model.csv"
    model_file.write_text(text)
    trials = read_trials([model_file, *files[1:]])
    data = decisions_from_trials(trials)
    block = dataset_benchmark(dataset, data, [n.startswith("subject-") for n in data.names], sorted(excluded))
    m = block.names.index("relabelled-model")
    expected = independent_loop(trials, "relabelled-model", excluded)
    got = (block.accuracy_difference[m], block.observed_consistency[m], block.error_consistency[m])
    assert got == pytest.approx(expected, abs=1e-12)
    # the relabelled observer scores exactly as it did as a human among the same partners
    humans = read_trials(files)
    hdata = decisions_from_trials(humans)
    hblock = dataset_benchmark(dataset, hdata, [True] * len(hdata.names), sorted(excluded))
    h = hblock.names.index("subject-01")
    assert hblock.error_consistency[h] == pytest.approx(block.error_consistency[m], abs=1e-12)


@pytest.mark.data
def test_published_human_baseline_rows():
    """The 8 published datasets: a row per human and the baseline; on cue-conflict (one condition) the humans'
    E is the paper's mean human-human kappa, and their shape bias the published ~0.96."""
    if not RAW.is_dir():
        pytest.skip(f"{RAW} not found (set CONTROVERSIAL_DATA_ROOT)")
    datasets = {d.name: read_trials(sorted(d.glob("*.csv"))) for d in sorted(RAW.iterdir()) if d.is_dir()}
    results = run_benchmark(datasets, "^subject-", BenchmarkOptions(kappa_resamples=0))
    assert len(results.datasets) == 8 and not results.skipped and not results.kappa_tests
    cue = results.tables["cue-conflict"]
    assert [r.name for r in cue] == [f"subject-{k:02d}" for k in range(1, 11)] + [HUMANS]
    assert cue[-1].error_consistency == pytest.approx(0.331, abs=5e-4)
    assert cue[-1].shape_bias == pytest.approx(0.96, abs=0.01)
    assert results.datasets["contrast"].excluded_conditions == ["c01", "c03", "c100"]
    (overall,) = results.tables[OVERALL]
    assert overall.name == HUMANS and overall.datasets == 8
    baseline = np.mean([results.tables[d][-1].error_consistency for d in results.datasets])
    assert overall.error_consistency == pytest.approx(baseline)
    assert 0.3 < overall.error_consistency < 0.5 and overall.accuracy_difference < 0.02


def test_conditions_are_ordered_by_their_numbers_where_every_label_has_one():
    assert condition_order(["c100", "c05", "c10", "c05"]) == ["c05", "c10", "c100"]
    assert condition_order(["90", "0", "270", "180"]) == ["0", "90", "180", "270"]
    assert condition_order(["cr", "bw"]) == ["bw", "cr"]
    assert condition_order(["128-10-10", "64-10-10", "1-10-10"]) == ["1-10-10", "64-10-10", "128-10-10"]
    assert condition_order(["inf", "0.55", "3.0"]) == ["0.55", "3.0", "inf"]  # "inf" has no number: alphabetical
