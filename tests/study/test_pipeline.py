"""Sweep -> export -> participants through the server -> PNAS CSV -> the analysis accepts it."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, make_sweep, run_task, settings_for
from PIL import Image

from controversial.analysis.model_responses import stimuli_from_folder
from controversial.analysis.options import AnalysisOptions
from controversial.analysis.pipeline import analyze_study
from controversial.analysis.study import build_study
from controversial.errors import UserError
from controversial.records.responses import read_human_ratings, read_model_responses
from controversial.records.study import RESPONSE_COLUMNS
from controversial.study.bundle import load_bundle
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, prolific_like_id, take_study
from controversial.study.server import ServeStudySettings, create_app

REPO = Path(__file__).resolve().parents[2]
MODEL_COLUMNS = (
    "model",
    "image",
    "response_category",
    "targeted_model_1",
    "targeted_model_2",
    "targeted_class_1",
    "targeted_class_2",
    "category_rating",
)


def test_bundle_stimuli_folder_is_what_evaluate_reads(small_bundle):
    bundle = load_bundle(small_bundle)
    by_image = {e.image: e for e in bundle.key.values()}
    found = stimuli_from_folder(small_bundle / "stimuli")
    assert len(found) == 30
    for stimulus in found:
        entry = by_image[stimulus.image]
        expected = (
            (entry.model_a, entry.model_b, entry.class_a_name, entry.class_b_name)
            if entry.kind == "controversial"
            else ("", "", "", "")
        )
        assert stimulus.targets == expected


def _model_responses(bundle_dir: Path, path: Path) -> None:
    """Random probabilities of two stand-in models for every rated image, in the PNAS model format."""
    bundle, rng = load_bundle(bundle_dir), np.random.default_rng(0)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(MODEL_COLUMNS)
        for entry in bundle.key.values():
            if entry.kind not in ("controversial", "natural"):
                continue
            targets = (
                [entry.model_a, entry.model_b, entry.class_a_name, entry.class_b_name]
                if entry.kind == "controversial"
                else ["", "", "", ""]
            )
            for model in ("model_x", "model_y"):
                for category in bundle.spec.categories:
                    writer.writerow([model, entry.image, category, *targets, f"{rng.random():.4f}"])


def test_scripted_participants_yield_ratings_the_analysis_accepts(small_bundle, tmp_path):
    token = "pipeline-admin-token-abcdefghijklmnopqrstuvwxyz"
    app = create_app(
        ServeStudySettings(
            study_dir=str(small_bundle),
            completion_code="X",
            database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        ),
        token,
    )
    attentive = instructions(load_bundle(small_bundle))
    with TestClient(app) as client:
        for index in range(3):
            rng = random.Random(index)
            result = take_study(
                client, prolific_like_id(rng), rng, instructed=attentive, resolve=resolver(app.state.engine)
            )
            assert result.redirect_url.endswith("cc=X") and len(result.answers) == 35
        export = client.get("/admin/responses.csv", headers={"Authorization": f"Bearer {token}"}).text
    ratings_path, models_path = tmp_path / "responses.csv", tmp_path / "models.csv"
    ratings_path.write_text(export)
    _model_responses(small_bundle, models_path)
    study = build_study(read_human_ratings(ratings_path), read_model_responses(models_path), exclude_repetitions=True)
    assert study.participants == ("P0001", "P0002", "P0003") and len(study.stimuli) == 30
    assert {s.true_class for s in study.stimuli if s.targeted_models is None} == {str(d) for d in range(10)}
    assert {s.condition for s in study.stimuli} == {"natural", "abs|vgg", "kde|vgg"}
    results = analyze_study(
        study,
        AnalysisOptions(
            bootstrap={"n_resamples": 200, "subset_resamples": 0, "other_subset_resamples": 0}, measures=["pearson"]
        ),
    )
    assert set(results.ranking) == {"model_x", "model_y"}


def test_serve_study_export_mode_writes_the_three_files(small_bundle, tmp_path, database_url):
    database = database_url
    app = create_app(ServeStudySettings(study_dir=str(small_bundle), completion_code="X", database_url=database))
    pid = prolific_like_id(random.Random(0))
    with TestClient(app) as client:
        attentive = instructions(load_bundle(small_bundle))
        take_study(client, pid, random.Random(0), instructed=attentive, resolve=resolver(app.state.engine))
    run_task(
        "serve_study",
        ["mode=export", f"study_dir={small_bundle}", f"database_url={database}", f"export.out_dir={tmp_path / 'out'}"],
        tmp_path / "run",
    )
    with (tmp_path / "out" / "responses.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == RESPONSE_COLUMNS and len(rows) == 1 + 33 * 10
    assert (tmp_path / "out" / "attention.csv").read_text().count("\n") == 1 + 2
    with (tmp_path / "out" / "participants.csv").open() as handle:
        participants = list(csv.DictReader(handle))
    # a script answers faster than the server's clock allows a person: flagged, by the server's clock
    assert [(p["prolific_pid"], p["status"], p["flags"]) for p in participants] == [(pid, "completed", "too_fast")]


def test_serve_mode_needs_a_completion_code(small_bundle, monkeypatch):
    monkeypatch.delenv("PROLIFIC_COMPLETION_CODE", raising=False)
    with pytest.raises(UserError, match="completion_code is not set"):
        run_task("serve_study", [f"study_dir={small_bundle}"], small_bundle)


def test_serve_mode_needs_jspsych_installed(small_bundle, tmp_path):
    with pytest.raises(UserError, match="run `npm ci` in human_study/"):
        run_task("serve_study", [f"study_dir={small_bundle}", "completion_code=X", f"vendor_dir={tmp_path}"], tmp_path)


@pytest.mark.data
def test_export_study_task_uses_real_mnist_test_images(tmp_path):
    from controversial.data import load_uint8

    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    overrides = [
        f"sweep_dir={sweep}",
        "name=real",
        f"studies_dir={tmp_path / 'studies'}",
        "per_pair=10",
        "natural_per_class=2",
        "n_repeats=5",
        "n_attention=1",
        "display.size=56",
        "display.resample=nearest",
        f"web_source={WEB_SOURCE}",
        "pilot=true",
    ]
    cfg = settings_for("export_study", overrides)
    bundle = load_bundle(run_task("export_study", overrides, tmp_path / "run"))
    images, labels = load_uint8("mnist", "test", cfg.data.root, False)
    natural = [e for e in bundle.key.values() if e.kind == "natural"]
    assert len(natural) == 20
    for entry in natural:
        index = int(entry.image.split("_")[1])
        assert entry.true_class == str(int(labels[index])) and entry.image == f"MNIST_{index}_{entry.true_class}.png"
        shown = np.asarray(Image.open(bundle.image_path(entry.stimulus_id)))
        assert np.array_equal(shown[::2, ::2], 255 - images[index, 0].numpy())  # inverted, 2x nearest upsampling
        original = np.asarray(Image.open(bundle.root / "stimuli" / entry.image))
        assert np.array_equal(original, images[index, 0].numpy())  # what models are evaluated on
    assert bundle.spec.provenance["command"] == "python export_study.py"  # as run_task names it
