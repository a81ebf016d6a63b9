"""The researcher's monitor (``/monitor``, ``/admin/monitor.json``) and the preview (``/api/preview``): the token
guards every figure, the counts and flags are the database's and the export's, and a preview stores nothing."""

from __future__ import annotations

import csv
import io
import random
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from controversial.study.bundle import load_bundle
from controversial.study.db import Participant, Response
from controversial.study.guards import CONTENT_SECURITY_POLICY
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, take_study
from controversial.study.server import ServeStudySettings, create_app

TOKEN = "monitor-admin-token-0123456789abcdefghijkl"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def app(small_bundle, database_url):
    settings = ServeStudySettings(
        study_dir=str(small_bundle), completion_code="C0DE", database_url=database_url, allow_test_ids=True
    )
    app = create_app(settings, TOKEN)
    yield app
    app.state.engine.dispose()


def _arrive(client, pid: str, consent: bool) -> dict:
    state = client.post("/api/session", json={"prolific_pid": pid, "session_id": f"s-{pid}"}).json()
    if consent:
        client.post(f"/api/sessions/{state['token']}/consent", json={"consent": True, "browser": {}})
    return state


def scripted_study(client, bundle) -> None:
    """Two who finish (one of them ignores the attention checks and rushes), one halfway, one not consented,
    and a PID used by two submissions."""
    attentive = {"instructed": instructions(bundle), "resolve": resolver(client.app.state.engine)}
    take_study(client, "done-careful", random.Random(1), **attentive)
    take_study(client, "done-careless", random.Random(2))  # answers the checks like any image
    state = _arrive(client, "halfway", consent=True)
    shown = attentive["resolve"]([t["stimulus_id"] for t in state["trials"][:5]])
    for trial in state["trials"][:5]:
        asked = attentive["instructed"].get(shown[trial["stimulus_id"]])  # an attention check: as it asks
        body = {"position": trial["position"], "stimulus_id": trial["stimulus_id"], "rt_ms": 3000.0}
        body |= {"ratings": {c: 100 * (c == asked) for c in bundle.spec.categories}, "first_reaction_rt_ms": 500.0}
        assert client.post(f"/api/sessions/{state['token']}/responses", json=body).status_code == 201
    _arrive(client, "no-consent", consent=False)
    _arrive(client, "twice", consent=True)
    client.post("/api/session", json={"prolific_pid": "twice", "session_id": "another-submission"})


def test_nothing_without_the_token(small_bundle, database_url, app):
    with TestClient(app) as client:
        page = client.get("/monitor")
        assert page.status_code == 200 and page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "Admin token" in page.text and 'id="started"></td>' in page.text  # the form, and empty cells
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN}):
            reply = client.get("/admin/monitor.json", headers=headers)
            assert reply.status_code == 401 and "started" not in reply.text
            assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert client.get("/monitor/../db.py").status_code == 404
    settings = ServeStudySettings(study_dir=str(small_bundle), completion_code="C", database_url=database_url)
    disabled = create_app(settings, None)  # no admin token configured: the figures are off
    with TestClient(disabled) as client:
        assert client.get("/admin/monitor.json", headers=BEARER).status_code == 403
    disabled.state.engine.dispose()


def test_the_counts_are_the_databases_and_the_flags_the_exports(small_bundle, app):
    bundle = load_bundle(small_bundle)
    with TestClient(app) as client:
        scripted_study(client, bundle)
        status = client.get("/admin/monitor.json", headers=BEARER).json()
        participants = list(csv.DictReader(io.StringIO(client.get("/admin/participants.csv", headers=BEARER).text)))
    with app.state.sessions() as session:
        rows = session.scalars(select(Participant)).all()
        answers = session.scalar(select(func.count()).select_from(Response))
    assert status["started"] == len(rows) == 6
    assert status["completed"] == sum(r.completed_at is not None for r in rows) == 2
    assert status["in_progress"] == sum(r.consented_at is not None and r.completed_at is None for r in rows) == 2
    assert status["not_consented"] == 2 and status["abandoned"] == 0 and status["screened_out"] == 0
    assert status["answers_total"] == answers
    halfway = next(p for p in status["in_progress_list"] if p["current_trial"] == 6)
    assert halfway["n_trials"] == rows[0].n_trials
    for flag in status["flags"]:  # the export's rules on the same answers
        assert status["flags"][flag] == sum(flag in p["flags"].split(";") for p in participants), flag
    assert status["flags"]["pid_conflict"] == 2 and status["flags"]["attention_failed"] == 1
    assert status["answers_per_minute"] == round(answers / 5, 1) and status["median_trial_s"] > 1.5


def test_silent_participants_count_as_abandoned(small_bundle, app):
    from controversial.study.monitor import study_status

    with TestClient(app) as client:
        _arrive(client, "left", consent=True)
    server = app.state.server
    with app.state.sessions() as session:
        later = time.time() + server.settings.monitor.abandoned_after_minutes * 60 + 1
        status = study_status(session, server.bundle, server.settings.quality, server.settings.monitor, later)
    assert (status.in_progress, status.abandoned) == (0, 1)


def test_a_preview_walks_the_whole_order_and_stores_nothing(small_bundle, app):
    with TestClient(app) as client:
        preview = client.get("/api/preview").json()
        assert preview["preview"] is True and preview["token"] is None
        real = _arrive(client, "real", consent=False)
        assert preview["n_total"] == real["n_total"] and len(preview["trials"]) == len(real["trials"])
        assert not {t["stimulus_id"] for t in preview["trials"]} & set(load_bundle(small_bundle).key)  # opaque ids
        kinds = load_bundle(small_bundle).key
        previewed = {t["image_url"]: app.state.preview_images.get(t["stimulus_id"])[0] for t in preview["trials"]}
        served = resolver(app.state.engine)([t["stimulus_id"] for t in real["trials"]])
        shown = {t["image_url"]: served[t["stimulus_id"]] for t in real["trials"]}
        assert sorted(previewed.values()) == sorted(shown.values())  # the same stimuli, in another order
        for images in (previewed, shown):  # the same pictures; the attention checks drawn afresh for each
            pictures = sorted(client.get(url).content for url, sid in images.items() if kinds[sid].kind != "attention")
            assert pictures == sorted(
                small_bundle.joinpath("images", f"{sid}.png").read_bytes()
                for sid in images.values()
                if kinds[sid].kind != "attention"
            )
            checks = [client.get(url) for url, sid in images.items() if kinds[sid].kind == "attention"]
            assert checks and all(c.status_code == 200 and c.content.startswith(b"\x89PNG") for c in checks)
        assert client.get("/api/preview/images/0123456789abcdef.png").status_code == 404
        assert "C0DE" in preview["redirect_url"]
    with app.state.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Participant)) == 1  # the real arrival only
