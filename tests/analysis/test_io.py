"""Every malformed input gets an error naming the file, row and column; policies are reported."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from controversial.analysis.study import build_study
from controversial.records.choices import read_trials, write_trials
from controversial.records.csvfile import InputError, csv_chunks, csv_text
from controversial.records.responses import (
    HUMAN_COLUMNS,
    MODEL_COLUMNS,
    natural_true_class,
    read_human_ratings,
    read_model_responses,
    write_human_ratings,
    write_model_responses,
)
from controversial.records.study import PARTICIPANT_COLUMNS, QUALITY_COLUMNS, read_attention, read_quality_flags

CATEGORIES = ("1", "3", "7")
IMAGES = {
    "MNIST_0_3.png": ["", "", "", ""],
    "A_1_vs_B_7_seed0.png": ["A", "B", "1", "7"],
    "A_7_vs_C_3_seed0.png": ["A", "C", "7", "3"],
}


def human_rows(subjects=("s1", "s2"), images=tuple(IMAGES)):
    rows = []
    for s, subject in enumerate(subjects):
        for t, image in enumerate(images):
            for k, category in enumerate(CATEGORIES):
                rating = 1.0 if (image.startswith("MNIST") and category == "3") else [0.0, 0.25, 0.5][(s + t + k) % 3]
                rows.append([subject, image, 0, category, *IMAGES[image], rating, 0.5, 1.2, t])
    return rows


def model_rows(models=("A", "B", "C"), images=tuple(IMAGES)):
    return [
        [m, image, category, *IMAGES[image], round(0.1 + 0.2 * ((i + j + k) % 4), 2)]
        for i, m in enumerate(models)
        for j, image in enumerate(images)
        for k, category in enumerate(CATEGORIES)
    ]


def write_csv(path, header, rows):
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture()
def files(tmp_path):
    human, model = tmp_path / "human.csv", tmp_path / "model.csv"
    write_human_ratings(human, human_rows())
    write_model_responses(model, model_rows())
    return human, model


def test_valid_study_is_aligned(files):
    study = build_study(read_human_ratings(files[0]), read_model_responses(files[1]))
    assert study.human.shape == (2, 3, 3) and study.model.shape == (3, 3, 3)
    assert study.categories == CATEGORIES
    assert study.stimuli[0].image == "MNIST_0_3.png" and study.stimuli[0].true_class == "3"
    assert list(study.conditions) == ["natural", "A|B", "A|C"]
    assert set(study.subsets()) >= {"all", "natural", "controversial", "pair A|B", "targets A", "targets C"}
    assert study.exclusions == ()


def test_subject_code_alias_is_accepted(tmp_path):
    path = write_csv(tmp_path / "pnas.csv", ["subject code", *HUMAN_COLUMNS[1:]], human_rows())
    table = read_human_ratings(path)
    assert {r.subject for r in table.rows} == {"s1", "s2"}


def test_missing_column(tmp_path):
    path = write_csv(
        tmp_path / "h.csv", [c for c in HUMAN_COLUMNS if c != "category_rating"], [r[:8] + r[9:] for r in human_rows()]
    )
    with pytest.raises(InputError, match=r"h\.csv, row 1 \(header\): missing column\(s\) category_rating"):
        read_human_ratings(path)
    path = write_csv(tmp_path / "m.csv", MODEL_COLUMNS[1:], [r[1:] for r in model_rows()])
    with pytest.raises(InputError, match=r"m\.csv, row 1 \(header\): missing column\(s\) model"):
        read_model_responses(path)


def test_unknown_rating(tmp_path):
    rows = human_rows()
    rows[4][8] = 0.3
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError,
        match=r"h\.csv, row 6, column 'category_rating': 0\.3 is not on the rating scale \(0, 0\.25, 0\.5, 0\.75, 1\)",
    ):
        read_human_ratings(path)


@pytest.mark.parametrize(
    "column, value, message",
    [
        (8, "nan", r"row 3, column 'category_rating': NaN is not allowed"),
        (8, "", r"row 3, column 'category_rating': empty value"),
        (0, "", r"row 3, column 'subject': empty value"),
        (3, "NaN", r"row 3, column 'response_category': NaN is not allowed"),
    ],
)
def test_nans_and_empty_values(tmp_path, column, value, message):
    rows = human_rows()
    rows[1][column] = value
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(InputError, match=r"h\.csv, " + message):
        read_human_ratings(path)


def test_nan_model_probability(tmp_path):
    rows = model_rows()
    rows[2][7] = "nan"
    path = write_csv(tmp_path / "m.csv", MODEL_COLUMNS, rows)
    with pytest.raises(InputError, match=r"m\.csv, row 4, column 'category_rating': NaN is not allowed"):
        read_model_responses(path)


def test_model_probability_out_of_range(tmp_path):
    rows = model_rows()
    rows[0][7] = 1.5
    path = write_csv(tmp_path / "m.csv", MODEL_COLUMNS, rows)
    with pytest.raises(
        InputError, match=r"m\.csv, row 2, column 'category_rating': 1\.5 is not a probability in \[0, 1\]"
    ):
        read_model_responses(path)


def test_duplicate_rows(tmp_path):
    rows = human_rows()
    rows.append(list(rows[0]))
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError,
        match=r"h\.csv, row 20, column 'response_category': duplicate "
        r".*\('s1', 'MNIST_0_3\.png', 0, '1'\) \(first on row 2\)",
    ):
        read_human_ratings(path)
    rows = model_rows()
    rows.append(list(rows[3]))
    path = write_csv(tmp_path / "m.csv", MODEL_COLUMNS, rows)
    with pytest.raises(
        InputError, match=r"m\.csv, row 29, column 'response_category': duplicate \(model, image, response_category\)"
    ):
        read_model_responses(path)


def test_participants_with_different_stimulus_sets(tmp_path, files):
    rows = [r for r in human_rows() if not (r[0] == "s2" and r[1] == "A_7_vs_C_3_seed0.png")]
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError,
        match=r"h\.csv, row \d+, column 'image': participants saw different stimulus sets: "
        r"'s1' rated 'A_7_vs_C_3_seed0\.png' but 's2' did not",
    ):
        build_study(read_human_ratings(path), read_model_responses(files[1]))


def test_missing_category_for_an_image(tmp_path, files):
    rows = human_rows()
    del rows[4]  # s1, second image, category "3"
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError, match=r"column 'response_category': participant 's1' has no rating for category '3'"
    ):
        build_study(read_human_ratings(path), read_model_responses(files[1]))


def test_images_without_model_responses(tmp_path, files):
    rows = [r for r in model_rows() if not (r[0] == "B" and r[1] == "A_7_vs_C_3_seed0.png")]
    path = write_csv(tmp_path / "m.csv", MODEL_COLUMNS, rows)
    with pytest.raises(
        InputError,
        match=r"m\.csv, column 'image': model 'B' has no response for image 'A_7_vs_C_3_seed0\.png', "
        r"category '1' \(rated in .*human\.csv, row \d+\)",
    ):
        build_study(read_human_ratings(files[0]), read_model_responses(path))


def test_inconsistent_targets(tmp_path, files):
    rows = human_rows()
    rows[5][4] = "Z"  # s1, image 2, third category: targeted_model_1 differs from the image's first row
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError, match=r"h\.csv, row 7, column 'targeted_model_1': targeted columns .* differ from row 5"
    ):
        build_study(read_human_ratings(path), read_model_responses(files[1]))


def test_partial_targets(tmp_path):
    rows = human_rows()
    rows[3][6] = ""
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError, match=r"h\.csv, row 5, column 'targeted_class_1': empty, but other targeted_\* columns are set"
    ):
        read_human_ratings(path)


def test_repetitions_are_an_explicit_policy(tmp_path, files):
    rows = human_rows()
    repeats = [[r[0], r[1], 1, *r[3:]] for r in rows if r[1] == "MNIST_0_3.png"]
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows + repeats)
    table = read_human_ratings(path)
    with pytest.raises(
        InputError,
        match=r"h\.csv, row 20, column 'image_repetition': 6 rows are repeated presentations "
        r".*exclude_repetitions=true",
    ):
        build_study(table, read_model_responses(files[1]))
    study = build_study(table, read_model_responses(files[1]), exclude_repetitions=True)
    assert study.human.shape == (2, 3, 3)
    assert [(e.what, e.count, e.detail) for e in study.exclusions] == [("rows", 6, "2 trials")]


def test_participant_exclusions_are_reported(files):
    human, model = read_human_ratings(files[0]), read_model_responses(files[1])
    with pytest.raises(InputError, match=r"exclude_participants: unknown participant\(s\) s9"):
        build_study(human, model, exclude_participants=["s9"])
    study = build_study(human, model, exclude_participants=["s2"])
    assert study.participants == ("s1",)
    assert study.exclusions[0].reason.startswith("listed in exclude_participants")
    study = build_study(human, model, min_natural_accuracy=0.5)
    assert study.participants == ("s1", "s2")
    assert study.exclusions[0].count == 0 and "natural-image accuracy below 0.5" in study.exclusions[0].reason


def test_attention_check_by_natural_accuracy(tmp_path, files):
    rows = human_rows()
    for r in rows:
        if r[0] == "s2" and r[1] == "MNIST_0_3.png":
            r[8] = 1.0 if r[3] == "7" else 0.0
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    study = build_study(read_human_ratings(path), read_model_responses(files[1]), min_natural_accuracy=0.5)
    assert study.participants == ("s1",)
    assert study.exclusions[-1].count == 1 and "s2 (0.000)" in study.exclusions[-1].detail


def test_natural_true_class_rule():
    assert natural_true_class("MNIST_12_7.png", CATEGORIES) == "7"
    assert natural_true_class("some/dir/CIFAR10_5_cat.png", ("airplane", "cat")) == "cat"
    assert natural_true_class("CIFAR_10_test_000_8160_frog", ("cat", "frog")) == "frog"  # the release: no extension
    assert natural_true_class("MNIST_000_8", tuple("0123456789")) == "8"
    assert natural_true_class("A_1_vs_B_7_seed0.png", CATEGORIES) is None
    with pytest.raises(InputError, match="class 'dog' is not a category"):
        natural_true_class("CIFAR10_5_dog.png", ("airplane", "cat"))
    with pytest.raises(InputError, match="no class can be read from the name"):
        natural_true_class("CIFAR10_5_1.png", ("airplane", "cat"))


def test_trials_format_errors(tmp_path):
    write_csv(
        tmp_path / "bad.csv",
        ["subj", "session", "trial", "rt", "object_response", "category", "condition"],
        [["s", 1, 1, 1, "a", "a", "c"]],
    )
    with pytest.raises(InputError, match=r"bad\.csv, row 1 \(header\): missing column\(s\) imagename"):
        read_trials([tmp_path / "bad.csv"])
    write_trials(tmp_path / "dup.csv", [["s", 1, 1, 1, "a", "a", "c", "img"], ["s", 1, 2, 1, "na", "a", "c", "img"]])
    with pytest.raises(
        InputError,
        match=r"dup\.csv, row 3, column 'imagename': subject 's' already answered "
        r"stimulus 'img' \(.*dup\.csv, row 2\)",
    ):
        read_trials([tmp_path / "dup.csv"])
    write_trials(tmp_path / "trial.csv", [["s", 1, "x", 1, "a", "a", "c", "img"]])
    with pytest.raises(InputError, match=r"trial\.csv, row 2, column 'trial': 'x' is not an integer"):
        read_trials([tmp_path / "trial.csv"])


def test_round_trip_preserves_values(files):
    table = read_human_ratings(files[0])
    assert np.isclose(sum(r.rating for r in table.rows), sum(r[8] for r in human_rows()))


def test_attention_check_file_policy(tmp_path, files):
    path = write_csv(
        tmp_path / "attention.csv",
        ["subject", "position", "instructed_category", "passed", "ratings"],
        [
            ["s1", 4, "3", "true", "0 100 0"],
            ["s1", 9, "7", "true", "0 0 100"],
            ["s2", 4, "3", "true", "0 100 0"],
            ["s2", 9, "7", "false", "0 0 0"],
        ],
    )
    attention = read_attention(path)
    assert attention == {"s1": (2, 2), "s2": (1, 2)}
    human, model = read_human_ratings(files[0]), read_model_responses(files[1])
    study = build_study(human, model, attention=attention, min_attention_passed=1.0)
    assert study.participants == ("s1",)
    assert study.exclusions[0].reason == "attention checks passed below 1" and study.exclusions[0].detail == "s2 (1/2)"
    with pytest.raises(InputError, match=r"no record for participant\(s\) s2"):
        build_study(human, model, attention={"s1": (2, 2)}, min_attention_passed=1.0)
    with pytest.raises(InputError, match="no attention-check file"):
        build_study(human, model, min_attention_passed=1.0)
    bad = write_csv(tmp_path / "bad.csv", ["subject", "passed"], [["s1", "yes"]])
    with pytest.raises(InputError, match=r"bad\.csv, row 2, column 'passed': 'yes'; allowed: true, false"):
        read_attention(bad)


def test_a_file_given_without_its_policy_is_refused(files):
    """attention_checks= without min_attention_passed, quality_flags= without exclude_flags: the file would
    exclude nobody in silence (issue 60, item 6)."""
    human, model = read_human_ratings(files[0]), read_model_responses(files[1])
    with pytest.raises(InputError, match="attention_checks is given but min_attention_passed is not.*nobody"):
        build_study(human, model, attention={"s1": (2, 2), "s2": (0, 2)})
    with pytest.raises(InputError, match=r"quality_flags is given but exclude_flags is empty.*exclude_flags=\["):
        build_study(human, model, quality_flags={"s1": (), "s2": ("too_fast",)})
    flagged = build_study(human, model, quality_flags={"s1": (), "s2": ("too_fast",)}, exclude_flags=("too_fast",))
    assert flagged.participants == ("s1",)


def test_constant_participant_is_an_error(tmp_path, files):
    rows = [[*r[:8], 0.0 if r[0] == "s2" else r[8], *r[9:]] for r in human_rows()]
    path = write_csv(tmp_path / "h.csv", HUMAN_COLUMNS, rows)
    with pytest.raises(
        InputError,
        match=r"h\.csv, column 'category_rating': participant\(s\) s2 gave the same value .*exclude_participants",
    ):
        build_study(read_human_ratings(path), read_model_responses(files[1]))
    study = build_study(read_human_ratings(path), read_model_responses(files[1]), exclude_participants=["s2"])
    assert study.participants == ("s1",)


def test_csv_chunks_stream_the_same_text_as_csv_text():
    rows = [[f"P{i:04d}", i, i / 7, ""] for i in range(500)]
    chunks = list(csv_chunks(("subject", "n", "x", "flags"), rows, size=256))
    assert len(chunks) > 10 and "".join(chunks) == csv_text(("subject", "n", "x", "flags"), rows)


def test_quality_flags_read_from_participants_csv(tmp_path):
    assert PARTICIPANT_COLUMNS[-len(QUALITY_COLUMNS) :] == QUALITY_COLUMNS
    path = tmp_path / "participants.csv"
    rows = [["P0001", "too_fast;straight_lining"], ["P0002", ""]]
    path.write_text(csv_text(("subject", "flags"), rows))
    assert read_quality_flags(path) == {"P0001": ("too_fast", "straight_lining"), "P0002": ()}
    (tmp_path / "bad.csv").write_text("subject,status\nP0001,completed\n")
    with pytest.raises(InputError, match="missing column"):
        read_quality_flags(tmp_path / "bad.csv")
