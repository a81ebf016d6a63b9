"""The nine attacks of issue 13, each replayed against the real app (production settings), and held.

1 session takeover by Prolific ID, 2 the condition read from HTTP headers or file metadata, 3 coerced
consent, 4 huge request bodies, 5 a bot that takes the study, 6 a weak or leaked admin token, 7 no
security headers, 8 an admin export that stalls participants, 9 placeholder consent text in a bundle.
The browser side of 1 (the page stops instead of redirecting) is in ``test_browser_e2e.py``.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import random
import shutil
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep, run_task
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from sqlalchemy import func, select, text

from controversial.analysis.study import build_study
from controversial.records.responses import ModelResponse, ModelTable, read_human_ratings
from controversial.records.study import read_quality_flags
from controversial.study.admin_token import AdminTokenError, check_admin_token, read_admin_token, write_admin_token
from controversial.study.bundle import BundleError, load_bundle
from controversial.study.db import Participant, Response, make_read_engine, session_factory
from controversial.study.export import ExportOptions, export_study
from controversial.study.guards import RateLimiter
from controversial.study.pnas_export import response_rows
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, prolific_like_id, served_checks, take_study
from controversial.study.server import RateLimitSettings, ServeStudySettings, create_app

from .conftest import SMALL

REPO = Path(__file__).resolve().parents[2]
ADMIN = "security-test-admin-token-0123456789abcdefghij"
DIGITS = [str(d) for d in range(10)]


@pytest.fixture
def app(small_bundle, tmp_path):
    app = create_app(
        ServeStudySettings(
            study_dir=str(small_bundle), completion_code="CODE", database_url=f"sqlite:///{tmp_path / 'responses.db'}"
        ),
        ADMIN,
    )
    yield app
    app.state.engine.dispose()


@pytest.fixture
def client(app):
    with TestClient(app) as test_client:
        yield test_client


def arrive(client, pid, session_id, token=None, study_id="a" * 24):
    body = {"prolific_pid": pid, "study_id": study_id, "session_id": session_id}
    if token:
        body["token"] = token
    return client.post("/api/session", json=body)


def rate(client, token, trial, value=25, rt=2500):
    ratings = {d: value for d in DIGITS}
    return client.post(
        f"/api/sessions/{token}/responses",
        json={
            "position": trial["position"],
            "stimulus_id": trial["stimulus_id"],
            "ratings": ratings,
            "rt_ms": rt,
            "first_reaction_rt_ms": 0,
        },
    )


def stored(app):
    with app.state.sessions() as session:
        query = select(Response.position, Response.ratings_json).order_by(Response.position)
        return [(p, json.loads(r)) for p, r in session.execute(query)]


def admin_csv(client, name):
    reply = client.get(f"/admin/{name}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert reply.status_code == 200, reply.text
    return list(csv.DictReader(io.StringIO(reply.text)))


# 1. Session takeover by Prolific ID ----------------------------------------------------------------------------


def test_1_a_prolific_id_alone_never_opens_someones_session(client, app):
    victim, session_id = prolific_like_id(random.Random(1)), prolific_like_id(random.Random(2))
    state = arrive(client, victim, session_id).json()
    token = state["token"]
    assert client.post(f"/api/sessions/{token}/consent", json={"consent": True}).status_code == 200
    for trial in state["trials"][:5]:
        assert rate(client, token, trial).status_code == 201

    evil = arrive(client, victim, "EVIL", study_id="EVIL")  # the attack as reported
    assert evil.status_code == 422 and evil.json()["detail"].startswith(
        "study_id: 'EVIL' is not a Prolific id (24 lower-case hex digits); session_id: 'EVIL' is not"
    )
    other = arrive(client, victim, "f" * 24)  # well-formed, but another submission, and no browser secret
    assert other.status_code == 200 and other.json()["token"] != token and other.json()["n_done"] == 0  # own row
    assert arrive(client, victim, "").status_code == 422  # SESSION_ID is required outside test mode

    resumed = arrive(client, victim, session_id, token=token).json()  # the victim's own browser resumes
    assert resumed["token"] == token and resumed["n_done"] == 5
    for trial in resumed["trials"]:
        assert rate(client, token, trial).status_code == 201
    assert client.post(f"/api/sessions/{token}/complete").status_code == 200
    assert [ratings for _, ratings in stored(app)] == [[25] * 10] * 35  # only the victim's answers
    (row,) = [r for r in admin_csv(client, "participants.csv") if r["session_id"] == session_id]
    assert (row["n_browser_changes"], row["n_refused_answers"]) == ("0", "0")


def test_1_a_stolen_submission_link_moves_the_session_visibly_and_never_overwrites(client, app):
    pid, session_id = prolific_like_id(random.Random(3)), prolific_like_id(random.Random(4))
    first = arrive(client, pid, session_id).json()
    client.post(f"/api/sessions/{first['token']}/consent", json={"consent": True})
    trial = first["trials"][0]
    assert rate(client, first["token"], trial, value=0).status_code == 201

    second = arrive(client, pid, session_id).json()  # same submission (PID + SESSION_ID), other browser
    assert second["token"] != first["token"] and second["n_done"] == 1
    revoked = rate(client, first["token"], first["trials"][1])
    assert revoked.status_code == 404 and "continued in another browser" in revoked.json()["detail"]
    changed = rate(client, second["token"], trial, value=100)  # the first answer cannot be overwritten
    assert changed.status_code == 409 and "answers cannot be changed" in changed.json()["detail"]
    assert stored(app) == [(1, [0] * 10)]
    (row,) = admin_csv(client, "participants.csv")
    assert (row["n_browser_changes"], row["n_refused_answers"]) == ("1", "1")
    assert {"answers_refused", "browser_changed"} <= set(row["flags"].split(";"))


def test_1_session_creation_is_rate_limited_per_client(small_bundle, tmp_path):
    app = create_app(
        ServeStudySettings(
            study_dir=str(small_bundle),
            completion_code="CODE",
            rate_limit=RateLimitSettings(sessions_per_minute=0.01, burst=20),
            database_url=f"sqlite:///{tmp_path / 'r.db'}",
        )
    )  # no refill
    rng = random.Random(5)
    with TestClient(app) as client:
        replies = [arrive(client, prolific_like_id(rng), prolific_like_id(rng)) for _ in range(60)]
        made_up = client.post("/api/session", json={"prolific_pid": "someone", "session_id": "x"})
    assert [r.status_code for r in replies] == [200] * 20 + [429] * 40
    assert int(replies[-1].headers["retry-after"]) >= 1 and "try again" in replies[-1].json()["detail"]
    assert made_up.status_code == 422 and "24 lower-case hex digits" in made_up.json()["detail"]
    with app.state.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Participant)) == 20
    app.state.engine.dispose()


def test_rate_limiter_refills_and_forgets_idle_clients():
    now = [0.0]
    limiter = RateLimiter(per_minute=6, burst=2, max_clients=2, clock=lambda: now[0])
    assert [limiter.retry_after("a") for _ in range(3)] == [0, 0, pytest.approx(10.0)]
    now[0] = 10.0
    assert limiter.retry_after("a") == 0
    limiter.retry_after("b")
    now[0] = 100.0
    limiter.retry_after("c")  # a third client: idle (refilled) buckets are dropped
    assert set(limiter.buckets) == {"c"}


# 2. The condition read from headers or file metadata -----------------------------------------------------------


def test_2_nothing_served_or_stored_about_an_image_reveals_its_condition(client, small_bundle):
    bundle = load_bundle(small_bundle)
    state = arrive(client, prolific_like_id(random.Random(6)), prolific_like_id(random.Random(7))).json()
    urls = [t["image_url"] for t in state["trials"]] + [
        d["image_url"] for d in client.get("/api/study").json()["demo_trials"]
    ]
    assert len(urls) == len(bundle.trials)  # every trial, attention checks and practice included
    lengths, headers = set(), set()
    for url in urls:
        reply = client.get(url)
        assert reply.status_code == 200
        assert not {"etag", "last-modified"} & set(reply.headers)
        lengths.add(reply.headers["content-length"])
        headers.add(reply.content[:33])  # signature + IHDR: size, bit depth, colour type
    assert len(lengths) == 1 and len(headers) == 1
    files = sorted((bundle.root / "images").glob("*.png"))
    assert len({p.stat().st_mtime for p in files}) == 1 and len({p.stat().st_size for p in files}) == 1
    trial_text = json.dumps(state["trials"])
    assert "prompt" not in trial_text and "attention" not in trial_text
    checks = served_checks(client.app.state.engine, bundle, [t["stimulus_id"] for t in state["trials"]])
    with_instruction = [t for t in state["trials"] if t["stimulus_id"] in checks]
    assert len(with_instruction) == SMALL["n_attention"]  # indistinguishable in the API, served as images


# 3. Coerced consent -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["yes", "1", "on", "true", 1, 1.0, None, [True], False])
def test_3_consent_must_be_json_true(client, app, value):
    token = arrive(client, prolific_like_id(random.Random(8)), prolific_like_id(random.Random(9))).json()["token"]
    reply = client.post(f"/api/sessions/{token}/consent", json={"consent": value})
    assert reply.status_code == 422 and reply.json()["detail"].startswith("consent:")
    with app.state.sessions() as session:
        assert session.scalar(select(Participant.consented_at)) is None
    assert client.post(f"/api/sessions/{token}/consent", json={"consent": True}).status_code == 200


# 4. Huge request bodies --------------------------------------------------------------------------------------


def test_4_bodies_over_the_limit_are_refused_before_they_are_read(client, app):
    big = client.post("/api/session", content=b"x" * (10 * 1024 * 1024), headers={"content-type": "application/json"})
    assert big.status_code == 413 and "larger than 16384 bytes" in big.json()["detail"]
    received, replies = [], []

    async def chunked():  # a 64 MB body without Content-Length, as the app's server hands it over
        received.append(1)
        return {"type": "http.request", "body": b"x" * 65536, "more_body": len(received) < 1000}

    async def reply(message):
        replies.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/session",
        "raw_path": b"/api/session",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }
    asyncio.run(app(scope, chunked, reply))
    assert replies[0]["status"] == 413
    assert len(received) == 1  # refused after the first 64 kB chunk: at most limit + one chunk in memory
    with app.state.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Participant)) == 0


# 5. A bot that takes the study ---------------------------------------------------------------------------------


def test_5_a_bot_is_flagged_stored_exported_and_excluded_by_policy(client, small_bundle, tmp_path):
    bundle = load_bundle(small_bundle)
    rng = random.Random(10)
    bot = take_study(client, prolific_like_id(rng), rng)  # no think time, cannot read the attention images
    resolve = resolver(client.app.state.engine)
    person = take_study(client, prolific_like_id(rng), rng, instructed=instructions(bundle), resolve=resolve)
    assert bot.redirect_url.endswith("cc=CODE")  # it is paid only if the researcher approves: the flags say no
    flags = {row["subject"]: row["flags"].split(";") for row in admin_csv(client, "participants.csv")}
    assert "attention_failed" in flags["P0001"] and "attention_failed" not in flags["P0002"]
    assert "too_fast" in flags["P0001"]  # by the server's clock, whatever rt the script claims
    attention = admin_csv(client, "attention.csv")
    assert {(r["subject"], r["passed"]) for r in attention} == {("P0001", "false"), ("P0002", "true")}

    (tmp_path / "participants.csv").write_text(
        client.get("/admin/participants.csv", headers={"Authorization": f"Bearer {ADMIN}"}).text
    )
    (tmp_path / "responses.csv").write_text(
        client.get("/admin/responses.csv", headers={"Authorization": f"Bearer {ADMIN}"}).text
    )
    human = read_human_ratings(tmp_path / "responses.csv")
    models = stand_in_models(human)
    study = build_study(
        human,
        models,
        exclude_repetitions=True,
        quality_flags=read_quality_flags(tmp_path / "participants.csv"),
        exclude_flags=("attention_failed",),
    )
    assert study.participants == ("P0002",)
    (excluded,) = [e for e in study.exclusions if e.what == "participant"]
    assert (excluded.reason, excluded.count, excluded.detail) == (
        "study-server flag attention_failed (exclude_flags)",
        1,
        "P0001",
    )
    assert person.answers and bot.answers


def stand_in_models(human):
    """A model table (two models, varied probabilities) for the rated images."""
    seen = {(r.image, r.category): r.targets for r in human.rows}
    rows = tuple(
        ModelResponse(model, image, category, targets, 0.1 + 0.08 * ((n * shift) % 11), n)
        for model, shift in (("m1", 3), ("m2", 7))
        for n, ((image, category), targets) in enumerate(seen.items())
    )
    return ModelTable(human.path, rows)


def test_quality_flags_and_policy_errors_are_explicit(tmp_path):
    from controversial.study.quality import QualitySettings, TrialRecord, assess

    same = TrialRecord((25,) * 10, 3000.0, 3000.0, None)
    quality = assess([same] * 10, QualitySettings())
    assert quality.flags == ("straight_lining",) and quality.longest_identical_run == 10
    fast = assess(
        [TrialRecord((0,) * 10, 3000.0, 200.0, None), TrialRecord((25,) * 10, 3000.0, 3000.0, None)],
        QualitySettings(max_fast_fraction=0.4),
    )
    assert fast.flags == ("too_fast",) and fast.n_fast == 1  # a real rt, but the server saw 0.2 s
    with pytest.raises(ValueError, match="max_fast_fraction"):
        QualitySettings(max_fast_fraction=2)


# 6. A weak or leaked admin token -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token, message",
    [
        ("x", "1 characters, at least 32"),
        ("a" * 40, "only 1 distinct characters"),
        ("0123456789" * 4, "only 10 distinct characters"),
        ("x" * 20 + " spaces and ünïcode " + "y" * 12, "letters, digits"),
    ],
)
def test_6_weak_admin_tokens_are_refused(small_bundle, token, message):
    with pytest.raises(AdminTokenError, match=message):
        create_app(ServeStudySettings(study_dir=str(small_bundle), completion_code="CODE"), token)


def test_6_the_token_comes_from_a_file_or_the_environment_never_the_config(small_bundle, tmp_path, monkeypatch):
    path = tmp_path / "secret" / "admin_token"
    run_task("serve_study", ["mode=token", f"admin_token_file={path}"], tmp_path / "run")
    token = path.read_text().strip()
    assert check_admin_token(token) == token and len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(AdminTokenError, match="exists"):
        write_admin_token(path)
    assert read_admin_token(path, environ={}) == token
    assert read_admin_token(None, environ={"STUDY_ADMIN_TOKEN": token}) == token
    assert read_admin_token(None, environ={}) is None
    with pytest.raises(AdminTokenError, match="at least 32"):
        read_admin_token(None, environ={"STUDY_ADMIN_TOKEN": "short"})

    monkeypatch.setenv("STUDY_ADMIN_TOKEN", token)
    cfg = _config("serve_study", [f"study_dir={small_bundle}", "completion_code=X", f"admin_token_file={path}"])
    assert token not in OmegaConf.to_yaml(cfg) and "admin_token" not in cfg  # what goes to .hydra/config.yaml
    with pytest.raises(ConfigCompositionException, match="admin_token"):
        _config("serve_study", [f"study_dir={small_bundle}", f"admin_token={token}"])  # refused, so never saved


def _config(name, overrides):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


# 7. Security headers ----------------------------------------------------------------------------------------


def test_7_every_response_carries_the_security_headers(client, web_assets):  # serves the vendored jsPsych
    token = arrive(client, prolific_like_id(random.Random(11)), prolific_like_id(random.Random(12))).json()["token"]
    replies = [
        client.get("/"),
        client.get("/api/study"),
        client.get("/static/experiment.js"),
        client.get("/vendor/jspsych/dist/index.browser.min.js"),
        client.get("/nowhere"),
        client.post(f"/api/sessions/{token}/consent", json={"consent": "yes"}),
        client.post("/api/session", content=b"x" * 20000),
        client.get("/admin/responses.csv"),
    ]
    assert [r.status_code for r in replies] == [200, 200, 200, 200, 404, 422, 413, 401]
    for reply in replies:
        policy = reply.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"


def test_7_the_page_needs_no_inline_script_or_style():
    import re

    for path in (WEB_SOURCE / "index.html", *(WEB_SOURCE / "text").glob("*.html")):
        page = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page), path  # every script is a file
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", page), path
    for path in WEB_SOURCE.glob("*.js"):
        assert "eval(" not in path.read_text() and "new Function" not in path.read_text(), path


# 8. An admin export that stalls participants -------------------------------------------------------------------


def test_8_an_open_export_neither_blocks_nor_sees_writes(client, app, small_bundle, tmp_path):
    bundle = load_bundle(small_bundle)
    state = arrive(client, prolific_like_id(random.Random(13)), prolific_like_id(random.Random(14))).json()
    token = state["token"]
    client.post(f"/api/sessions/{token}/consent", json={"consent": True})
    rate(client, token, state["trials"][0])
    url = f"sqlite:///{tmp_path / 'responses.db'}"
    reader = make_read_engine(url, app.state.engine)
    assert reader is not app.state.engine
    with session_factory(reader)() as session, session.begin():
        rows = response_rows(session, bundle, include_incomplete=True)
        first = next(rows)  # the export is mid-way, inside its snapshot
        for trial in state["trials"][1:4]:  # participants keep answering meanwhile, committed at once
            assert rate(client, token, trial).status_code == 201
        exported = [first, *rows]
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    assert len(exported) == 10  # the snapshot: one trial x ten categories, not the three answered since
    assert len(stored(app)) == 4
    reader.dispose()


# 9. Placeholder consent text -----------------------------------------------------------------------------------


def test_9_placeholder_consent_text_is_refused_unless_a_pilot(tmp_path):
    sweep = make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),))
    settings = {k: v for k, v in SMALL.items() if k != "pilot"}
    with pytest.raises(BundleError, match=r"text/consent.html: 'Edit this file'.*pilot=true"):  # [duration] is filled
        export_study(sweep, tmp_path / "studies", ExportOptions(name="real", **settings), fake_mnist_test, WEB_SOURCE)
    assert not (tmp_path / "studies" / "real").exists() or not any((tmp_path / "studies" / "real").iterdir())
    pilot = export_study(
        sweep, tmp_path / "studies", ExportOptions(name="try", pilot=True, **settings), fake_mnist_test, WEB_SOURCE
    )
    assert load_bundle(pilot).spec.pilot is True

    edited = tmp_path / "web"
    shutil.copytree(WEB_SOURCE, edited)
    (edited / "text" / "consent.html").write_text(
        "<p>Approved by the ethics board (ref. 2026-17); 20 minutes, GBP 3; contact: lab@example.org. Do you agree?</p>"
    )
    real = export_study(sweep, tmp_path / "studies", ExportOptions(name="real", **settings), fake_mnist_test, edited)
    assert load_bundle(real).spec.pilot is False
    overrides = [
        f"sweep_dir={sweep}",
        "name=cli",
        f"studies_dir={tmp_path / 'studies'}",
        "per_pair=10",
        f"web_source={WEB_SOURCE}",
    ]
    with pytest.raises(BundleError, match="placeholder text"):
        run_task("export_study", overrides, tmp_path / "run")
