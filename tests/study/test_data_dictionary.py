"""The export's data dictionary and Psych-DS description: every column written is described and every described
column is written, file by file; the description names the bundle, its key and the command; the readers take
the folder as it is."""

from __future__ import annotations

import csv
import hashlib
import json
import random

from fastapi.testclient import TestClient
from helpers import run_task

from controversial.records.responses import read_human_ratings
from controversial.records.study import read_attention, read_quality_flags
from controversial.study.bundle import load_bundle
from controversial.study.data_dictionary import described_columns, written_columns
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, take_study
from controversial.study.server import ServeStudySettings, create_app

REQUIRED = ("@context", "@type", "name", "description", "variableMeasured")  # Psych-DS 0.1.0


def _export(small_bundle, database_url, tmp_path):
    app = create_app(ServeStudySettings(study_dir=str(small_bundle), completion_code="X", database_url=database_url))
    with TestClient(app) as client:
        attentive = instructions(load_bundle(small_bundle))
        take_study(client, f"{1:024x}", random.Random(1), instructed=attentive, resolve=resolver(app.state.engine))
    app.state.engine.dispose()
    out = tmp_path / "export"
    args = ["mode=export", f"study_dir={small_bundle}", f"database_url={database_url}", f"export.out_dir={out}"]
    run_task("serve_study", args, tmp_path / "run", "python serve_study.py mode=export")
    return out


def test_every_column_written_is_described_and_every_described_column_written(small_bundle, database_url, tmp_path):
    out = _export(small_bundle, database_url, tmp_path)
    bundle = load_bundle(small_bundle)
    described, written = described_columns(bundle), written_columns()  # the model responses' included
    assert {name: set(columns) for name, columns in described.items()} == {n: set(c) for n, c in written.items()}
    with (out / "data_dictionary.csv").open(newline="") as handle:
        dictionary = list(csv.DictReader(handle))
    for name in ("responses.csv", "attention.csv", "participants.csv"):
        with (out / name).open(newline="") as handle:
            header = next(csv.reader(handle))
        assert [row["column"] for row in dictionary if row["file"] == name] == header, name
    assert {row["file"] for row in dictionary} == {"responses.csv", "attention.csv", "participants.csv"}
    assert all(row["description"] and row["type"] for row in dictionary)
    rating = next(r for r in dictionary if r["file"] == "responses.csv" and r["column"] == "category_rating")
    assert rating["allowed_values"] == "0, 0.25, 0.5, 0.75, 1" and rating["unit"] == "probability"
    category = next(r for r in dictionary if r["column"] == "response_category")
    assert category["allowed_values"] == ", ".join(bundle.spec.categories)


def test_the_psych_ds_description(small_bundle, database_url, tmp_path):
    out = _export(small_bundle, database_url, tmp_path)
    description = json.loads((out / "dataset_description.json").read_text())
    assert all(description[key] for key in REQUIRED) and description["@type"] == "Dataset"
    headers = set()
    for name in ("responses.csv", "attention.csv", "participants.csv"):
        with (out / name).open(newline="") as handle:
            headers |= set(next(csv.reader(handle)))
    assert {v["name"] for v in description["variableMeasured"]} == headers
    bundle = description["studyBundle"]
    assert bundle["label"] == "pilot/v1" and description["version"] == "pilot/v1"
    assert bundle["key_sha256"] == hashlib.sha256((small_bundle / "key.csv").read_bytes()).hexdigest()
    assert description["command"] == "python serve_study.py mode=export"


def test_the_readers_take_the_export_folder_as_it_is(small_bundle, database_url, tmp_path):
    out = _export(small_bundle, database_url, tmp_path)
    assert {p.name for p in out.iterdir()} >= {"data_dictionary.csv", "dataset_description.json"}
    ratings = read_human_ratings(out / "responses.csv", (0, 0.25, 0.5, 0.75, 1))
    assert len(ratings.rows) == 33 * 10
    assert read_attention(out / "attention.csv") and read_quality_flags(out / "participants.csv")
