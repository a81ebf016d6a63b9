"""The Python API as a notebook meets it (issue 60, item 12): ``settings`` with a typo says "did you mean" as the
command line does, ``write_analysis`` writes the report from results, and ``run_command`` writes into
``out_dir`` also for a command whose output folder is a setting (``overview``)."""

from __future__ import annotations

import json

import pytest

import controversial as cv
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.errors import UserError
from controversial.tasks import Invocation, overview


def test_a_typo_in_settings_gets_the_commands_did_you_mean():
    with pytest.raises(UserError, match="unknown setting 'sweepdir'; did you mean sweep_dir"):
        cv.settings("overview", ["sweepdir=x"])
    with pytest.raises(UserError, match="unknown command 'overveiw'"):
        cv.settings("overveiw")


def test_run_command_writes_overview_into_out_dir(tmp_path, monkeypatch):
    seen = {}

    def run(cfg: overview.OverviewSettings, invocation: Invocation) -> None:  # the command's own signature
        seen["out_dir"], seen["invocation"] = cfg.out_dir, invocation.out_dir

    monkeypatch.setattr(overview, "run", run)
    cv.run_command("overview", [f"sweep_dir={tmp_path / 'sweep'}"], out_dir=tmp_path / "mine")
    assert seen == {"out_dir": str(tmp_path / "mine"), "invocation": tmp_path / "mine"}
    cv.run_command("overview", [f"sweep_dir={tmp_path / 'sweep'}", f"out_dir={tmp_path / 'named'}"], tmp_path)
    assert seen["out_dir"] == str(tmp_path / "named")  # an explicit out_dir= wins


def test_write_analysis_writes_the_report_of_analyze_study(tmp_path):
    models = simulate_models(3, "MNIST", 4, 1, seed=0)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim1": 1.0}), 4, seed=1)
    human, model = write_study(tmp_path / "data", models, ratings)
    study = cv.build_study(cv.read_human_ratings(human), cv.read_model_responses(model))
    options = cv.AnalysisOptions(
        bootstrap={"n_resamples": 50, "subset_resamples": 0, "other_subset_resamples": 0},
        error_consistency={"enabled": False},
    )
    results = cv.analyze_study(study, options)
    written = cv.write_analysis(results, tmp_path / "out", figures=False, config=options.model_dump())
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Which model predicts people best?" in report and written.ranking == results.ranking
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["ranking"] == results.ranking and saved["inputs"]["config"]["bootstrap"]["n_resamples"] == 50
