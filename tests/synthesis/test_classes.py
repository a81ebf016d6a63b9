"""``synthesis.classes``: a chosen subset of a dataset's classes is synthesized as its |S| x (|S|-1) cells, with the
dataset's class indices; the names are checked before any model loads; the run records the dataset's classes."""

from __future__ import annotations

import json

import pytest
from helpers import run_task, tiny_abs_vgg_overrides
from pydantic import ValidationError

from controversial.api import settings
from controversial.errors import UserError
from controversial.records.manifest import read_manifest
from controversial.records.runs import RUN_SETTINGS_NAME, run_classes
from controversial.synthesis import runstate
from controversial.synthesis.engine import noise_images, ordered_class_pairs
from controversial.synthesis.options import chosen_classes

QUICK = ["synthesis.max_steps=30", "synthesis.stop_score=0.4", "synthesis.threshold=0.3", "progress=false"]
CIFAR = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[str]:
    return tiny_abs_vgg_overrides(tmp_path_factory.mktemp("checkpoints")) + ["max_attempts=1"]


def test_a_subset_of_a_ten_class_run_is_its_cells_only(pair, tmp_path):
    rows = run_task("synthesize", [*pair, *QUICK, "synthesis.classes=[7,'3',1]"], tmp_path / "run")
    assert sorted({r.cell for r in rows}) == ordered_class_pairs([1, 3, 7])  # the dataset's indices
    assert len({r.cell for r in read_manifest(tmp_path / "run" / "manifest.csv")}) == 3 * 2
    recorded = json.loads((tmp_path / "run" / RUN_SETTINGS_NAME).read_text())
    assert recorded["synthesis"]["classes"] == [1, 3, 7] and recorded["class_names"] == [str(d) for d in range(10)]
    classes = run_classes([tmp_path / "run" / "manifest.csv"], rows)
    assert classes.dataset == "mnist" and classes.synthesized == (1, 3, 7) and len(classes.class_names) == 10


def test_a_subset_cell_starts_from_the_same_noise_as_in_a_full_run():
    full = noise_images(ordered_class_pairs(10), [0] * 90, (1, 4, 4))
    subset = noise_images(ordered_class_pairs([2, 5]), [0, 0], (1, 4, 4))
    cells = ordered_class_pairs(10)
    assert (subset[0] == full[cells.index((2, 5))]).all() and (subset[1] == full[cells.index((5, 2))]).all()


def test_cells_of_sixteen_classes_start_from_distinct_noise():
    cells = ordered_class_pairs(16)
    images = noise_images(cells, [3] * len(cells), (1, 2, 2)).flatten(1)
    assert len(cells) == 240 and len({tuple(row.tolist()) for row in images}) == 240


@pytest.mark.parametrize(
    "classes, message",
    [
        (["cat", "zebra"], r"'zebra' is not a class of this dataset; allowed: the dataset's class names \(airplane"),
        ([3, 12], r"12 is not a class"),
        (["cat", 3], r"class 'cat' is listed twice"),
    ],
)
def test_unknown_or_repeated_classes_are_refused_naming_the_allowed_ones(classes, message):
    with pytest.raises(UserError, match=message):
        chosen_classes(classes, CIFAR)
    assert chosen_classes(["truck", 0], CIFAR) == (0, 9) and chosen_classes(None, CIFAR) == tuple(range(10))


def test_the_classes_are_checked_with_the_settings_before_any_model_loads():
    with pytest.raises(ValidationError, match="synthesis.classes: 'eleven' is not a class"):
        settings("synthesize", ["model_a=abs", "model_b=vgg", "synthesis.classes=[1,eleven]"])
    with pytest.raises(ValidationError, match="at least 2"):
        settings("synthesize", ["model_a=abs", "model_b=vgg", "synthesis.classes=[1]"])


def test_a_run_recorded_before_the_class_names_resumes(tmp_path):
    current = {"seed": 0, "synthesis": {"classes": None, "threshold": 0.75}, "dataset": "mnist", "class_names": ["0"]}
    old = {"seed": 0, "synthesis": {"threshold": 0.75}}
    (tmp_path / RUN_SETTINGS_NAME).write_text(json.dumps(old))
    runstate.check_run_settings(tmp_path, current)  # no error: the added keys take the current values
    with pytest.raises(UserError, match="other settings"):
        runstate.check_run_settings(tmp_path, {**current, "synthesis": {"classes": [0, 1], "threshold": 0.75}})
