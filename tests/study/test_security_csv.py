"""Issue 51 item 8: formula injection. A pilot PROLIFIC_PID such as ``-1-1`` reached ``participants.csv`` as is,
and a spreadsheet opening the export runs it as a formula. Every CSV goes through ``records.csvfile``."""

from __future__ import annotations

import csv
import io
import random

import pytest
from fastapi.testclient import TestClient

from controversial.records.csvfile import csv_text, open_rows
from controversial.records.study import read_quality_flags
from controversial.study.scripted_participants import take_study
from controversial.study.server import ServeStudySettings, create_app
from controversial.tasks.serve_study import export_csvs

TOKEN = "formula-test-admin-token-0123456789-abcdef"
PIDS = ["-1-1", "-cmd", "pilot-anna"]  # what allow_test_ids accepts ([A-Za-z0-9_-]{1,64}); the first two are formulas


def _cells(text: str, column: str) -> list[str]:
    return [row[column] for row in csv.DictReader(io.StringIO(text))]


@pytest.fixture
def database(small_bundle, tmp_path):
    url = f"sqlite:///{tmp_path / 'responses.db'}"
    settings = ServeStudySettings(
        study_dir=str(small_bundle), completion_code="C0DE", database_url=url, allow_test_ids=True
    )
    app = create_app(settings, TOKEN)
    with TestClient(app) as client:
        for k, pid in enumerate(PIDS):
            assert "C0DE" in take_study(client, pid, random.Random(k)).redirect_url
        reply = client.get("/admin/participants.csv", headers={"Authorization": f"Bearer {TOKEN}"})
    app.state.engine.dispose()
    assert reply.status_code == 200, reply.text
    return url, reply.text


def test_a_pilot_export_escapes_formula_pids_and_the_readers_undo_it(small_bundle, database, tmp_path):
    url, served = database
    written = export_csvs(small_bundle, url, tmp_path / "out")  # the offline export, serve_study.py mode=export
    for text in (served, written["participants.csv"].read_text(encoding="utf-8")):
        raw = _cells(text, "prolific_pid")
        assert sorted(raw) == sorted(["'-1-1", "'-cmd", "pilot-anna"])  # what a spreadsheet sees: text
        assert not [cell for cells in csv.reader(io.StringIO(text)) for cell in cells if cell and cell[0] in "=+-@\t\r"]
    read_back = [record["prolific_pid"] for _, record in open_rows(written["participants.csv"], ["prolific_pid"])]
    assert sorted(read_back) == sorted(PIDS)  # the project's reader returns what the participant typed
    assert set(read_quality_flags(written["participants.csv"])) == {"P0001", "P0002", "P0003"}


def test_numbers_stay_numbers_and_only_text_is_escaped(tmp_path):
    rows = [["-1-1", -0.5, -3, "-0.5", "-1e-3", "-inf", "=HYPERLINK(1)", "'-2", "@A1"]]
    header = ["pid", "float", "int", "text_number", "exponent", "infinite", "formula", "quoted", "at"]
    text = csv_text(header, rows)
    assert text.splitlines()[1] == "'-1-1,-0.5,-3,-0.5,-1e-3,'-inf,'=HYPERLINK(1),''-2,'@A1"  # -inf: a formula
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    ((_, record),) = open_rows(path, header)
    assert list(record.values()) == ["-1-1", "-0.5", "-3", "-0.5", "-1e-3", "-inf", "=HYPERLINK(1)", "'-2", "@A1"]


def test_a_cell_with_a_carriage_return_stays_one_cell(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(csv_text(["a", "b"], [["\rx", 1], ["y\rz", 2.5]]), encoding="utf-8")
    assert [record for _, record in open_rows(path, ["a", "b"])] == [{"a": "\rx", "b": "1"}, {"a": "y\rz", "b": "2.5"}]
