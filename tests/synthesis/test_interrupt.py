"""Ctrl-C during synthesis keeps the cells that had finished (as rows of a valid manifest, each with its PNG) and
prints one line with what was kept and the command that resumes; a run that fails before writing anything
leaves no folder."""

from __future__ import annotations

import pytest
from helpers import interrupt_synthesis, run_task, tiny_abs_vgg_overrides

from controversial.records.manifest import read_manifest, without_timing

SETTINGS = ["synthesis.max_steps=40", "synthesis.stop_score=0.4", "synthesis.threshold=0.3", "progress=false"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[str]:
    return tiny_abs_vgg_overrides(tmp_path_factory.mktemp("checkpoints"))


@pytest.mark.slow
def test_an_interrupt_keeps_finished_cells_and_says_how_to_resume(tmp_path, pair, monkeypatch, capsys):
    full = run_task("synthesize", [*pair, *SETTINGS], tmp_path / "full")
    interrupt_synthesis(monkeypatch, 5)
    with pytest.raises(SystemExit) as stopped:
        run_task("synthesize", [*pair, *SETTINGS], tmp_path / "run", "python synthesize.py model_a=abs model_b=vgg")
    assert stopped.value.code == 130
    kept = read_manifest(tmp_path / "run" / "manifest.csv")
    accepted = {r.cell for r in kept if r.accepted}
    assert 0 < len(kept) < 90 and accepted
    assert all((tmp_path / "run" / r.image_file).is_file() for r in kept if r.image_file)
    # each kept row is what the uninterrupted run wrote for that cell: scored on the same 8-bit image
    same = {(r["class_a"], r["class_b"], r["seed"]): r for r in without_timing(full)}
    assert all(same[(r["class_a"], r["class_b"], r["seed"])] == r for r in without_timing(kept))
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (
        f"interrupted: kept {len(accepted)}/90 cells accepted ({len(kept)} attempts) in "
        f"{tmp_path / 'run' / 'manifest.csv'}; resume with: python synthesize.py model_a=abs model_b=vgg "
        f"output_dir={tmp_path / 'run'}"
    )
    monkeypatch.undo()
    resumed = run_task("synthesize", [*pair, *SETTINGS], tmp_path / "run")
    assert without_timing(resumed)[: len(kept)] == without_timing(kept)
    assert {r.cell for r in resumed} == {r.cell for r in full}


def test_an_interrupt_before_anything_finished_leaves_no_folder(tmp_path, pair, monkeypatch, capsys):
    interrupt_synthesis(monkeypatch, 1)
    with pytest.raises(SystemExit):
        run_task("synthesize", [*pair, "synthesis.max_steps=5", "progress=false"], tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert "interrupted: nothing had finished, so no folder was kept; start again with: python synthesize.py" in (
        capsys.readouterr().err
    )


def test_a_failed_run_leaves_no_folder_with_only_its_lock_and_settings(tmp_path, pair):
    # test-image starts need the MNIST test split, absent here: the run fails after taking its folder
    with pytest.raises(Exception, match=r"MNIST \(test\) not found"):
        run_task(
            "synthesize",
            [*pair, "init=test_image", f"data.root={tmp_path / 'no_data'}", "data.download=false"],
            tmp_path / "run",
        )
    assert not (tmp_path / "run").exists()
