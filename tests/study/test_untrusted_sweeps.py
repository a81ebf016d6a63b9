"""Sweeps, manifests and bundles from someone else are untrusted input (issue 58, items 2, 3 and 4): a name in
them never becomes a path outside the output folder, and a path in them never reads outside its run folder.

Each test reproduces an attack that worked on 009621f, on a tiny synthetic sweep (random PNGs, no model).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import DIGITS, WEB_SOURCE, fake_mnist_test, make_sweep

from controversial.analysis.model_responses import stimuli_from_manifest
from controversial.errors import UserError
from controversial.records.manifest import read_manifest, write_manifest
from controversial.records.study import key_text, read_key
from controversial.study.bundle import KEY_FILE, load_bundle
from controversial.study.export import ExportOptions, export_study
from controversial.tasks import Invocation
from controversial.tasks import overview as overview_task
from controversial.tasks.overview import OverviewSettings

from .conftest import SMALL

EVIL_CLASS = "../../../../../outside/ESCAPED"  # enough '..' to climb out of <tmp>/studies/<name>/<staging>/stimuli


def rewrite_rows(run: Path, change) -> None:
    """Rewrite a run's manifest row by row, as anyone holding the file can (writing does not validate)."""
    manifest = run / "manifest.csv"
    write_manifest(manifest, [change(row) for row in read_manifest(manifest)])


def test_a_class_name_that_is_a_path_writes_nothing_outside_the_bundle(tmp_path):
    """Item 2: class 0 named ``../../../../../outside/ESCAPED`` in run_settings.json and the manifest."""
    sweep = make_sweep(tmp_path / "sweep")
    names = [EVIL_CLASS, *DIGITS[1:]]
    for run in sweep.iterdir():
        (run / "run_settings.json").write_text(json.dumps({"dataset": "mnist", "class_names": names}))

        def evil(row):
            return replace(row, class_a_name=names[row.class_a], class_b_name=names[row.class_b])

        rewrite_rows(run, evil)
    with pytest.raises(UserError, match="cannot be used as a name"):
        export_study(sweep, tmp_path / "studies", ExportOptions(name="s", **SMALL), fake_mnist_test, WEB_SOURCE)
    assert not list(tmp_path.rglob("ESCAPED*")), "a file was written from the class name"
    assert not list((tmp_path / "studies").rglob("v1"))


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_a_manifest_cannot_copy_an_image_from_anywhere_into_a_bundle(tmp_path, how):
    """Item 3: every row's image_file names a private photo outside the run (absolute, ``..``, or a symlink)."""
    sweep = make_sweep(tmp_path / "sweep")
    private = tmp_path / "private"
    private.mkdir()
    for run in sweep.iterdir():

        def leak(row, run=run):
            photo = private / row.image_file
            photo.write_bytes((run / row.image_file).read_bytes())
            if how == "symlink":
                (run / f"link_{row.image_file}").symlink_to(photo)
            relative = {"absolute": str(photo), "dotdot": f"../../private/{row.image_file}"}
            return replace(row, image_file=relative.get(how, f"link_{row.image_file}"))

        rewrite_rows(run, leak)
    with pytest.raises(UserError, match="leads outside"):
        export_study(sweep, tmp_path / "studies", ExportOptions(name="s", **SMALL), fake_mnist_test, WEB_SOURCE)
    assert not (tmp_path / "studies" / "s" / "v1").exists()
    with pytest.raises(UserError, match="leads outside"):  # evaluate.py manifests=<it> reads by the same rule
        stimuli_from_manifest(sweep)


def test_an_overview_writes_nothing_outside_its_folder(tmp_path):
    """Item 4: a model named ``x/../../../OVERVIEW`` in a manifest (Fig. 3 is named after the pair)."""
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    rewrite_rows(sweep / "abs_vs_vgg", lambda row: replace(row, model_a="x/../../../OVERVIEW"))
    out = tmp_path / "sweep" / "overview"
    settings = OverviewSettings(sweep_dir=str(sweep), out_dir=str(out), progress=False)
    with pytest.raises(UserError, match="column 'model_a'.*cannot be used as a name"):
        overview_task.run(settings, Invocation(out))
    assert not list(tmp_path.rglob("OVERVIEW*"))


def test_a_bundle_whose_key_names_paths_is_refused(small_bundle, tmp_path):
    """A bundle received from someone: key names become file names (images/<id>.png, stimuli/<image>)."""

    copy = tmp_path / "theirs" / "v1"
    shutil.copytree(small_bundle, copy)
    key = read_key(copy / KEY_FILE)
    first = next(e for e in key.values() if e.image)
    key[first.stimulus_id] = replace(first, image="../../../private.png")
    (copy / KEY_FILE).write_text(key_text(list(key.values())))
    with pytest.raises(UserError, match="key image.*cannot be used as a name"):
        load_bundle(copy)


@pytest.mark.parametrize("lost", ["stimuli", "images", "web/index.html"])
def test_a_bundle_copied_in_part_is_refused(small_bundle, tmp_path, lost):
    """A bundle appears complete or not at all, also a copy received from someone: a missing file is named."""

    copy = tmp_path / "theirs" / "v1"
    shutil.copytree(small_bundle, copy)
    victim = copy / lost if lost.endswith(".html") else sorted((copy / lost).iterdir())[0]
    victim.unlink()
    with pytest.raises(UserError, match=r"incomplete bundle, 1 file\(s\) missing|no display image for stimulus"):
        load_bundle(copy)


def test_names_are_checked_where_they_are_read_and_again_where_files_are_written(tmp_path):
    """The second line of defence: writers check what the readers already refused."""
    from controversial.datasets import DATASETS, DatasetInfo
    from controversial.records.names import stimulus_filename
    from controversial.synthesis.sweep_overview import plot_pair_grids

    described = {**DATASETS["mnist"].to_dict(), "name": "mine", "class_names": ["a", "../b"]}
    with pytest.raises(UserError, match="class name"):  # a checkpoint's, model file's or run's dataset description
        DatasetInfo.from_dict(described)
    with pytest.raises(UserError, match="stimulus file name"):
        stimulus_filename("x/../../y", "0", "vgg", "1", 0)
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    rows = [replace(r, model_a="x/../../../OVERVIEW") for r in read_manifest(sweep / "abs_vs_vgg" / "manifest.csv")]
    rows = [replace(r, image_file=str(sweep / "abs_vs_vgg" / r.image_file)) for r in rows]
    with pytest.raises(UserError, match="overview figure"):
        plot_pair_grids(rows, tmp_path / "overview")
    assert not list(tmp_path.rglob("OVERVIEW*"))
