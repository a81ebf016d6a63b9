"""A pilot's handful of participants: the report and the console say that the participant bootstrap is too
coarse to read, and no number is printed as ``-0.000`` (issue 60, item 8)."""

from __future__ import annotations

from helpers import ANALYZE_SMALL as SMALL
from helpers import run_analyze

from controversial.analysis.report import few_participants_note, fmt


def test_numbers_never_print_as_negative_zero():
    assert fmt(-1e-9) == "0.000" and fmt(-0.0) == "0.000" and fmt(-0.0004, 3) == "0.000"
    assert fmt(-0.0006) == "-0.001" and fmt(float("nan")) == "n/a" and fmt(0.5, 2) == "0.50"


def test_the_note_counts_the_distinct_resamples():
    assert "10 distinct resamples" in few_participants_note(3)
    assert few_participants_note(10) is None


def test_a_three_participant_pilot_is_flagged_in_report_and_console(tmp_path, capsys):
    overrides = [o for o in SMALL if not o.startswith("simulate.n_participants")]
    run_analyze(tmp_path, [*overrides, "simulate.n_participants=3", "figures=false"])
    printed = capsys.readouterr().out
    report = (tmp_path / "report.md").read_text()
    assert "**Only 3 participants**: the participant bootstrap has 10 distinct resamples" in report
    assert "Only 3 participants" in printed
    assert "-0.000" not in report and "-0.000" not in printed
