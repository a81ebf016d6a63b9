"""``pilot_study.py``: scripted participants take a bundle over HTTP on loopback, then export and analysis."""

from __future__ import annotations

import csv
import json

from helpers import run_task, write_tiny_checkpoints


def test_a_scripted_pilot_serves_exports_and_analyses_and_the_rater_comes_first(small_bundle, tmp_path, capsys):
    models = write_tiny_checkpoints(tmp_path / "models" / "mnist", ["abs", "kde", "vgg"], "mnist").parent
    out = tmp_path / "pilot"
    results = run_task(
        "pilot_study",
        [f"study_dir={small_bundle}", "rater=vgg", "participants=4", f"models_dir={models}", "resamples=200"],
        out,
        "python pilot_study.py rater=vgg",
    )
    printed = capsys.readouterr().out
    assert "pilot: 4 scripted participants (ratings: vgg + noise) took pilot/v1 over http://127.0.0.1:" in printed
    assert "exported 1320 rating rows from 4 participant(s)" in printed  # 33 rated trials x 10 categories each
    assert (out / "pilot.db").is_file()  # the pilot's own database, not the bundle's
    with (out / "participants.csv").open() as handle:
        assert [row["status"] for row in csv.DictReader(handle)] == ["completed"] * 4
    assert (out / "analysis" / "report.md").is_file()  # analyze.py read the export folder as it is
    description = json.loads((out / "dataset_description.json").read_text())
    assert [d["name"] for d in description["distribution"]] == [
        "responses.csv",
        "attention.csv",
        "participants.csv",
        "model_responses.csv",
    ]
    assert description["command"] == "python pilot_study.py rater=vgg"
    assert results.ranking[0] == "vgg"
