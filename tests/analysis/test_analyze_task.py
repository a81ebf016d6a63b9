"""``analyze.py`` composed in-process: a small simulated study end to end, and explicit data paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ANALYZE_SMALL as SMALL
from helpers import run_analyze

from controversial.records.choices import write_trials
from controversial.records.csvfile import InputError


def test_default_run_is_a_labelled_simulated_study(tmp_path, capsys):
    results = run_analyze(tmp_path, SMALL)
    assert results.ranking[0] == "sim2"
    report = (tmp_path / "report.md").read_text()
    assert "SIMULATED STUDY" in report and "## Is the difference real?" in report
    assert "SIMULATED STUDY" in capsys.readouterr().out
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["inputs"]["simulated"] is True
    assert saved["prediction"]["all"]["bootstrap"]["n_resamples"] == 300
    for name, path in saved["figures"].items():
        assert (tmp_path / path).stat().st_size > 1000, name
        assert f"]({path})" in report


def test_explicit_inputs_and_choices(tmp_path):
    first = run_analyze(tmp_path / "a", SMALL + ["figures=false"])
    human = first.inputs.human_ratings
    model = first.inputs.model_responses
    choices = tmp_path / "choices"
    for subject, answers in (("subject-01", "aab"), ("subject-02", "abb"), ("resnet", "aaa")):
        write_trials(
            choices / f"{subject}_session_1.csv",
            [[subject, 1, t, 500, r, "a", "c1" if t < 2 else "c2", f"img{t}"] for t, r in enumerate(answers)],
        )
    results = run_analyze(
        tmp_path / "b",
        SMALL
        + [
            "figures=false",  # the figures have their own tests; this one reads the report
            f"human_ratings={human}",
            f"model_responses={model}",
            f"choices={choices}",
            "exclude_participants=[sim_participant_01]",
        ],
    )
    assert results.inputs.simulated is False
    assert [e["detail"] for e in results.study.exclusions if e["what"] == "participant"] == ["sim_participant_01"]
    assert results.choices["choices"].names == ["resnet", "subject-01", "subject-02"]
    assert "Error consistency (trial-level choices): choices" in (tmp_path / "b" / "report.md").read_text()
    assert "sim_participant_01" in (tmp_path / "b" / "report.md").read_text()


def test_ratings_without_model_responses_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="model_responses"):
        run_analyze(tmp_path, SMALL + ["human_ratings=somewhere.csv"])
    with pytest.raises(InputError, match="file not found"):
        run_analyze(tmp_path, SMALL + ["human_ratings=nowhere.csv", "model_responses=nowhere.csv"])


@pytest.mark.slow
def test_acceptance_scale_default_run(tmp_path):
    """The issue's acceptance run: 30 participants x 820 stimuli x 10 categories x 9 models, 100,000 resamples."""
    results = run_analyze(tmp_path, [])
    assert results.ranking[0] == "sim3"
    all_ = results.prediction["all"]
    assert all_.n_stimuli == 820 and len(results.study.participants) == 30
    assert all_.bootstrap.n_resamples == 100_000 and all_.bootstrap.strata == 37
    assert len(all_.bootstrap.pairwise.names) == 10
    assert (tmp_path / "report.md").is_file() and (tmp_path / "fig_model_comparison.png").is_file()


def test_other_subsets_are_bootstrapped_when_asked(tmp_path):
    results = run_analyze(tmp_path, SMALL + ["figures=false", "error_consistency.enabled=false"])
    pair = results.prediction["pair sim1|sim2"]
    assert pair.bootstrap.n_resamples == 50 and pair.bootstrap.strata == 1
    assert results.prediction["targets sim2"].bootstrap.strata == 3


@pytest.mark.slow
def test_entry_point_runs_from_the_command_line(tmp_path):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "analyze.py",
            *SMALL,
            "figures=false",
            "error_consistency.enabled=false",
            f"hydra.run.dir={tmp_path}",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "SIMULATED STUDY" in done.stdout and "   1  sim2" in done.stdout
    assert (tmp_path / "report.md").is_file() and (tmp_path / "results.json").is_file()


def test_choices_alone_run_error_consistency_without_ratings(tmp_path, capsys):
    choices = tmp_path / "choices" / "toy"
    answers = {"subject-01": "aabab", "subject-02": "abbab", "subject-03": "aab_b", "resnet": "aaaab", "vit": "aaabb"}
    for subject, given in answers.items():
        write_trials(
            choices / f"toy_{subject}_session_1.csv",
            [
                [
                    subject,
                    1,
                    t,
                    0.5,
                    "na" if r == "_" else r,
                    "a" if t % 2 else "b",
                    "" if subject in ("resnet", "vit") else f"c{t % 2}",
                    f"{t:04d}_toy_{subject}_img{t}.png",
                ]
                for t, r in enumerate(given)
            ],
        )
    results = run_analyze(tmp_path / "run", SMALL + [f"choices={tmp_path / 'choices'}"])
    assert results.prediction is None and results.inputs.simulated is False
    block = results.choices["toy"]
    assert block.n_trials == 5 and block.names == ["resnet", "subject-01", "subject-02", "subject-03", "vit"]
    assert block.is_human == [False, True, True, True, False]
    for aggregate in (block.whole, block.per_condition):
        assert set(aggregate.group_means) >= {"human-human", "model-model", "model-human", "resnet-human"}
    assert block.whole.kappa_bootstrap_ci is not None and block.null_band is not None
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "prediction" not in saved and list(saved) == ["inputs", "choices", "benchmark", "figures"]
    assert saved["choices"]["toy"]["files"][0].endswith("toy_resnet_session_1.csv")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "SIMULATED" not in report and "Error consistency (trial-level choices): toy" in report
    assert (tmp_path / "run" / "fig_cobs_cexp_choices_toy.png").is_file()
    assert "toy" in capsys.readouterr().out
