"""The study's duration: estimated at export, written into the consent text's [duration], warned about when long."""

from __future__ import annotations

import csv
import logging
import shutil

import pytest
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep

from controversial.errors import UserError
from controversial.records.responses import HUMAN_COLUMNS
from controversial.study.bundle import WEB_DIR, load_bundle
from controversial.study.duration import (
    DEFAULT_SECONDS_PER_TRIAL,
    READING_WORDS_PER_MINUTE,
    DurationOptions,
    estimate_duration,
    pilot_seconds_per_trial,
)
from controversial.study.export import ExportOptions, export_study

SMALL = {"per_pair": 10, "natural_per_class": 1, "n_repeats": 2, "n_attention": 1, "n_demo": 1}


def _export(tmp_path, web_source=WEB_SOURCE, **options):
    settings = ExportOptions(name="d", **{**SMALL, "pilot": True, **options})
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    return load_bundle(export_study(sweep, tmp_path / "studies", settings, fake_mnist_test, web_source))


def _responses(path, times: dict[tuple[str, int], float], subject: str = "subject") -> None:
    """A responses.csv in the columns serve_study.py mode=export writes (or the PNAS release's 'subject code')."""
    columns = [subject if c == "subject" else c for c in HUMAN_COLUMNS]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, restval="")
        writer.writeheader()
        for (name, trial), rt in times.items():
            for category in ("0", "1"):  # a trial's time repeats on each of its category rows
                row = {subject: name, "image": "MNIST_1_7.png", "response_category": category, "rt": rt, "trial": trial}
                writer.writerow({**row, "image_repetition": 0, "category_rating": 0.5, "first_reaction_rt": 100})


def test_the_bundle_s_consent_states_the_estimated_minutes(tmp_path):
    bundle = _export(tmp_path)
    consent = (bundle.root / WEB_DIR / "text" / "consent.html").read_text()
    recorded = bundle.spec.provenance["duration"]
    assert "[duration]" not in consent and f"about <em>{recorded['minutes']}</em> minutes" in consent
    assert "[duration]" in (WEB_SOURCE / "text" / "consent.html").read_text()  # the source is left as it was
    trials = len(bundle.trials)  # 23 trials and 1 practice trial
    assert trials == 24 and recorded["seconds_per_trial"] == DEFAULT_SECONDS_PER_TRIAL
    assert recorded["minutes"] == 5  # 24 x 9 s = 3.6 min, plus about a minute of reading


def test_a_real_consent_text_may_leave_the_duration_to_the_export(tmp_path):
    """[duration] is no placeholder any more: a consent text that is otherwise final exports without pilot=true."""
    web = tmp_path / "web"
    shutil.copytree(WEB_SOURCE, web)
    (web / "text" / "consent.html").write_text("<p>Approved text, ref 2026-17. It takes about [duration] minutes.</p>")
    bundle = _export(tmp_path, web, pilot=False)
    assert (bundle.root / WEB_DIR / "text" / "consent.html").read_text().endswith("about 5 minutes.</p>")


def test_the_pilot_s_median_trial_time_is_used(tmp_path):
    path = tmp_path / "export" / "responses.csv"
    path.parent.mkdir()
    _responses(path, {("a", 1): 10000, ("a", 2): 12000, ("a", 3): 60000, ("b", 1): 11000, ("b", 2): 13000})
    assert pilot_seconds_per_trial(path) == (12.0, 5, 2)  # one time per trial, not one per category row
    estimate = estimate_duration(DurationOptions(pilot_responses=str(path)), 100, [])
    assert (estimate.minutes, estimate.seconds_per_trial) == (20, 12.0)
    assert estimate.source == "median of 5 pilot trials of 2 participant(s)" and estimate.doubt is None
    assert estimate_duration(DurationOptions(seconds_per_trial=3, pilot_responses=str(path)), 100, []).minutes == 5
    _responses(path, {("Exp1_S01", 1): 4000, ("Exp1_S01", 2): 5000}, subject="subject code")
    assert pilot_seconds_per_trial(path) == (4.5, 2, 1)
    too_fast = estimate_duration(DurationOptions(pilot_responses=str(path)), 100, [])  # a self-test's clicks
    assert too_fast.doubt and "4.5 s, less than 9 s" in too_fast.doubt


def test_a_scripted_pilot_s_random_times_are_refused(tmp_path):
    path = tmp_path / "responses.csv"
    _responses(path, {("a", 1): 4000})
    (tmp_path / "pilot.db").touch()  # pilot_study.py's run dir
    with pytest.raises(UserError, match="scripted pilot's export"):
        pilot_seconds_per_trial(path)


def test_a_file_that_is_not_an_export_is_named(tmp_path):
    path = tmp_path / "responses.csv"
    path.write_text("subject,trial\na,1\n")
    with pytest.raises(UserError, match="no column 'rt'"):
        pilot_seconds_per_trial(path)
    with pytest.raises(UserError, match="no such file"):
        pilot_seconds_per_trial(tmp_path / "missing.csv")


def test_reading_time_counts_the_words_not_the_markup():
    text = "<div class='text-page'><p>" + "word " * READING_WORDS_PER_MINUTE + "</p></div>"
    assert estimate_duration(DurationOptions(seconds_per_trial=60), 1, [text]).reading_minutes == 1.0


def test_a_long_study_is_warned_about_in_one_paragraph(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="controversial.study.export"):
        _export(tmp_path, duration={"seconds_per_trial": 60, "max_minutes": 20})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "min" in r.getMessage()]
    assert len(warnings) == 1 and "longer than duration.max_minutes=20" in warnings[0] and "\n" not in warnings[0]
    assert any(r.getMessage().startswith("estimated duration: about 25 min") for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="controversial.study.export"):
        _export(tmp_path, duration={"seconds_per_trial": 60})
    assert not [r for r in caplog.records if "max_minutes" in r.getMessage()]
