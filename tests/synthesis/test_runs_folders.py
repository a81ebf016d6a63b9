"""One rule for "a run, a sweep, or a folder of them" (``records.runs``), the same in overview.py,
export_study.py / design_study.py (``collect_sweep``) and evaluate.py's ``manifests=``: a single run folder is
accepted, two runs of one pair (a re-run) are read once with the newest winning and a note naming both, and
symlinked run folders are followed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import make_run

from controversial.analysis.model_responses import stimuli_from_manifest
from controversial.errors import UserError
from controversial.records.manifest import read_manifest
from controversial.records.runs import find_manifests
from controversial.study.selection import SelectionError, collect_sweep
from controversial.tasks import Invocation
from controversial.tasks import overview as overview_task
from controversial.tasks.overview import OverviewSettings


def _overview(sweep: Path, out: Path) -> list:
    cfg = OverviewSettings(sweep_dir=str(sweep), out_dir=str(out), fig2_class_pairs=[(7, 3)], progress=False)
    overview_task.run(cfg, Invocation(out))
    return read_manifest(out / "manifest.csv")


def _readers(folder: Path, out: Path) -> tuple[int, int, int]:
    """Rows each command reads from ``folder``: overview, collect_sweep, evaluate's manifests= folder."""
    return len(_overview(folder, out)), len(collect_sweep(folder)), len(stimuli_from_manifest(folder, True))


def test_a_single_run_folder_is_accepted_everywhere(tmp_path):
    run = tmp_path / "outputs" / "abs_vs_vgg"
    make_run(run, "abs", "vgg", np.random.default_rng(0))
    assert _readers(run, tmp_path / "overview") == (90, 90, 90)


@pytest.mark.slow
def test_a_rerun_of_a_pair_is_read_once_newest_first_and_named(tmp_path, capsys):
    old, new = tmp_path / "runs" / "10-00-00", tmp_path / "runs" / "11-00-00"
    make_run(old, "abs", "vgg", np.random.default_rng(0), drop={(0, 1)})
    newer_rows = make_run(new, "abs", "vgg", np.random.default_rng(1))
    os.utime(old / "manifest.csv", (1_000_000, 1_000_000))
    assert _readers(tmp_path / "runs", tmp_path / "overview") == (90, 90, 90)
    out = capsys.readouterr().out
    assert f"abs vs vgg: read from 2 runs ({new}, {old})" in out and f"taken from the newest, {new}" in out
    stimuli = {s.row.cell: s for s in collect_sweep(tmp_path / "runs")}
    assert all(stimuli[r.cell].row.hard_score == r.hard_score for r in newer_rows)
    assert all(s.image_path.parent == new.resolve() for s in stimuli.values())


@pytest.mark.slow
def test_symlinked_run_folders_are_followed_once(tmp_path):
    real = tmp_path / "real"
    make_run(real / "abs_vs_vgg", "abs", "vgg", np.random.default_rng(0))
    make_run(real / "kde_vgg", "kde", "vgg", np.random.default_rng(1))
    links = tmp_path / "links"
    links.mkdir()
    (links / "abs_vs_vgg").symlink_to(real / "abs_vs_vgg", target_is_directory=True)
    (links / "kde_vs_vgg").symlink_to(real / "kde_vgg", target_is_directory=True)
    (links / "loop").symlink_to(links, target_is_directory=True)  # a cycle is read once, not forever
    assert len(find_manifests(links)) == 2
    assert _readers(links, tmp_path / "overview") == (180, 180, 180)


def test_a_missing_folder_or_one_without_runs_says_which(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"nowhere does not exist: pass a synthesize.py run folder"):
        _overview(tmp_path / "nowhere", tmp_path / "o")
    with pytest.raises(SelectionError, match=r"no manifest.csv in .*empty or any folder below it"):
        collect_sweep(tmp_path / "empty")
