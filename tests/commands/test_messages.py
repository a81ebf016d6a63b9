"""Messages a new user meets in the first week: each names what was really wrong."""

from __future__ import annotations

import pytest
from helpers import compose_synthesize

from controversial.analysis.model_responses import stimuli_from_folder
from controversial.analysis.simulate import simulate_models, simulate_participants, true_probabilities, write_study
from controversial.cli import error_message, register_defaults
from controversial.records.csvfile import InputError
from controversial.records.responses import read_human_ratings, read_model_responses
from controversial.tasks import command_settings


def test_a_misspelt_setting_gets_did_you_mean_not_hydras_plus_hint():
    register_defaults("synthesize", command_settings("synthesize"))  # as synthesize.py does before Hydra starts
    with pytest.raises(Exception) as caught:
        compose_synthesize("modela=abs")
    message = error_message(caught.value)
    assert message == "unknown setting 'modela'; did you mean model_a (model_a=abs)?"
    with pytest.raises(Exception) as caught:
        compose_synthesize("nonsense_key=1")
    assert error_message(caught.value) == "unknown setting 'nonsense_key'"


def test_a_folder_that_does_not_exist_is_reported_as_such(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder"):
        stimuli_from_folder(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: no PNG images"):
        stimuli_from_folder(tmp_path / "empty")


def test_an_empty_csv_is_an_empty_file_not_missing_columns(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputError, match=r"empty.csv: empty file \(not even a header row\)"):
        read_human_ratings(tmp_path / "empty.csv")
    with pytest.raises(InputError, match=r"empty.csv: empty file"):
        read_model_responses(tmp_path / "empty.csv")


def test_swapped_human_and_model_files_are_recognised_as_swapped(tmp_path):
    models = simulate_models(n_models=2, stimuli_per_pair=10, natural_per_class=1, seed=0)
    ratings = simulate_participants(true_probabilities(models, models.names, {"sim1": 1.0}), 2, seed=0)
    human, model = write_study(tmp_path, models, ratings)
    with pytest.raises(InputError, match=r"model_responses.csv: this is a model responses file .*swapped\?"):
        read_human_ratings(model)
    with pytest.raises(InputError, match=r"human_ratings.csv: this is a human ratings file .*swapped\?"):
        read_model_responses(human)
