"""``serve_study.py mode=export``: a study never served has no database, which is said and nothing is created;
every export prints its counts."""

from __future__ import annotations

import random
import shutil

import pytest
from fastapi.testclient import TestClient
from helpers import run_task

from controversial.errors import UserError
from controversial.study.bundle import load_bundle
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, prolific_like_id, take_study
from controversial.study.server import ServeStudySettings, create_app


def test_export_of_a_never_served_study_says_so_and_creates_nothing(small_bundle, tmp_path):
    bundle = tmp_path / "studies" / "pilot" / "v1"
    shutil.copytree(small_bundle, bundle, ignore=shutil.ignore_patterns("responses.db*"))
    out = tmp_path / "out"
    with pytest.raises(UserError, match=r"no database yet .*study pilot/v1 has not been served"):
        run_task("serve_study", ["mode=export", f"study_dir={bundle}", f"export.out_dir={out}"], tmp_path / "run")
    assert not (bundle / "responses.db").exists() and not out.exists()
    with pytest.raises(UserError, match="no database yet \\(database_url\\)"):
        run_task(
            "serve_study",
            ["mode=export", f"study_dir={bundle}", f"database_url=sqlite:///{tmp_path / 'typo.db'}"],
            tmp_path / "run",
        )
    assert not (tmp_path / "typo.db").exists()


def test_every_export_prints_its_counts(small_bundle, tmp_path, database_url, capsys):
    database = database_url
    app = create_app(ServeStudySettings(study_dir=str(small_bundle), completion_code="X", database_url=database))
    with TestClient(app) as client:
        take_study(
            client,
            prolific_like_id(random.Random(1)),
            random.Random(1),
            instructed=instructions(load_bundle(small_bundle)),
            resolve=resolver(client.app.state.engine),
        )
    args = ["mode=export", f"study_dir={small_bundle}", f"database_url={database}", f"export.out_dir={tmp_path}"]
    run_task("serve_study", args, tmp_path / "run")
    out = capsys.readouterr().out
    assert f"exported 330 rating rows from 1 participant(s) to {tmp_path / 'responses.csv'}" in out
    assert "2 attention-check rows to attention.csv, 1 participant(s) to participants.csv" in out
