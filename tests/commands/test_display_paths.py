"""Summary lines show a run's folder as the README does: relative to the working directory when inside it."""

from pathlib import Path

from controversial.display_paths import shown


def test_a_folder_inside_the_working_directory_is_shown_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / "outputs" / "synthesize" / "abs_vs_vgg") == "outputs/synthesize/abs_vs_vgg"
    assert shown("outputs/run") == "outputs/run"


def test_a_folder_elsewhere_is_shown_absolute(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert shown(tmp_path / "elsewhere") == str((tmp_path / "elsewhere").resolve())
    assert Path(shown("../elsewhere")).is_absolute()
