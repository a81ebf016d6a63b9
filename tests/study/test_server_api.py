"""Collection API: sessions, resume, strict validation (4xx, nothing stored), idempotency, admin export."""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from controversial.records.csvfile import csv_text
from controversial.records.responses import read_human_ratings
from controversial.records.study import RESPONSE_COLUMNS, read_attention
from controversial.study.bundle import load_bundle
from controversial.study.db import Response
from controversial.study.pnas_export import TABLES
from controversial.study.quality import QualitySettings
from controversial.study.scripted_participants import served_checks
from controversial.study.server import ServeStudySettings, create_app

TOKEN = "test-admin-token-0123456789-abcdefghijkl"
CODE = "C0DE42"
DIGITS = [str(d) for d in range(10)]


@pytest.fixture
def app(small_bundle, database_url):
    settings = ServeStudySettings(
        study_dir=str(small_bundle), completion_code=CODE, database_url=database_url, allow_test_ids=True
    )
    app = create_app(settings, TOKEN)
    yield app
    app.state.engine.dispose()


@pytest.fixture
def client(app, small_bundle):
    INSTRUCTED.clear()
    with TestClient(app) as test_client:
        yield test_client


def start(client, pid="pid1", consent=True):
    reply = client.post("/api/session", json={"prolific_pid": pid, "study_id": "st1", "session_id": f"se-{pid}"})
    assert reply.status_code == 200, reply.text
    state = reply.json()
    served = [t["stimulus_id"] for t in state.get("trials", [])]
    INSTRUCTED.update(served_checks(client.app.state.engine, client.app.state.bundle, served))
    if consent:
        assert (
            client.post(
                f"/api/sessions/{state['token']}/consent", json={"consent": True, "browser": {"width": 1280}}
            ).status_code
            == 200
        )
    return state


INSTRUCTED: dict[str, str] = {}  # served attention check id -> category; filled by `start` from the key and database


def answer(trial, value=25, **overrides):
    body = {
        "position": trial["position"],
        "stimulus_id": trial["stimulus_id"],
        "ratings": {d: value for d in DIGITS},
        "rt_ms": 2500.0,
        "first_reaction_rt_ms": 300,
    }
    if trial["stimulus_id"] in INSTRUCTED:  # attention check: do what its image says
        wanted = INSTRUCTED[trial["stimulus_id"]]
        body["ratings"] = {d: 100 if d == wanted else 0 for d in DIGITS}
    body.update(overrides)
    return body


def stored(app) -> int:
    with app.state.sessions() as session:
        return session.scalar(select(func.count()).select_from(Response))


def finish(client, state, value=25):
    for trial in state["trials"]:
        reply = client.post(f"/api/sessions/{state['token']}/responses", json=answer(trial, value))
        assert reply.status_code == 201, reply.text
    return client.post(f"/api/sessions/{state['token']}/complete")


def admin(client, path, token=TOKEN):
    return client.get(path, headers={"Authorization": f"Bearer {token}"})


def test_health_and_public_study_config(client, small_bundle, web_assets):
    assert client.get("/api/health").json() == {
        "status": "ok",
        "study": "pilot/v1",
        "batch": 1,
        "database": "ok",
        "web_assets": True,
    }
    study = client.get("/api/study").json()
    assert study["categories"] == DIGITS and study["rating_levels"] == [0, 25, 50, 75, 100]
    assert len(study["demo_trials"]) == 1


def test_nothing_from_the_private_key_reaches_the_browser(client, small_bundle):
    state = start(client)
    public = json.dumps(state) + client.get("/api/study").text + client.get("/").text
    for word in ("abs", "vgg", "kde", "controversial", "natural", "seed", "MNIST_", "key.csv"):
        assert word not in public
    assert client.get("/static/../key.csv").status_code == 404
    assert client.get("/key.csv").status_code in (404, 405)
    assert all(set(t) == {"position", "stimulus_id", "image_url"} for t in state["trials"])  # one shape for all
    attention = [t for t in state["trials"] if t["stimulus_id"] in INSTRUCTED]
    assert len(attention) == 2
    for trial in attention + state["trials"][:3]:
        assert client.get(trial["image_url"]).headers["content-type"] == "image/png"


def test_order_is_stored_and_a_returning_pid_resumes(client, app):
    first = start(client, "resumer")
    assert first["n_done"] == 0 and first["n_total"] == len(first["trials"]) == 35
    for trial in first["trials"][:5]:
        assert client.post(f"/api/sessions/{first['token']}/responses", json=answer(trial)).status_code == 201
    again = client.post("/api/session", json={"prolific_pid": "resumer", "token": first["token"]}).json()
    assert again["token"] == first["token"] and again["consented"] is True
    assert again["n_done"] == 5 and again["trials"] == first["trials"][5:]
    other = start(client, "someone_else")
    assert [t["stimulus_id"] for t in other["trials"]] != [t["stimulus_id"] for t in first["trials"]]


def test_completion_requires_every_trial_and_a_completed_pid_is_told_so(client):
    state = start(client)
    client.post(f"/api/sessions/{state['token']}/responses", json=answer(state["trials"][0]))
    early = client.post(f"/api/sessions/{state['token']}/complete")
    assert early.status_code == 409 and "34 trial(s) not stored yet" in early.json()["detail"]
    state["trials"] = state["trials"][1:]
    done = finish(client, state)
    assert done.status_code == 200
    assert done.json()["redirect_url"] == f"https://app.prolific.co/submissions/complete?cc={CODE}"
    assert client.post(f"/api/sessions/{state['token']}/complete").status_code == 200  # idempotent
    back = client.post("/api/session", json={"prolific_pid": "pid1", "session_id": "se-pid1"}).json()
    assert back["status"] == "completed" and "already completed" in back["message"]
    late = client.post(f"/api/sessions/{state['token']}/responses", json=answer(state["trials"][0]))
    assert late.status_code == 409


def test_duplicate_submissions_are_idempotent(client, app):
    state = start(client)
    trial = state["trials"][0]
    url = f"/api/sessions/{state['token']}/responses"
    assert client.post(url, json=answer(trial)).json()["status"] == "stored"
    repeat = client.post(url, json=answer(trial))
    assert repeat.status_code == 200 and repeat.json() == {"status": "duplicate", "n_done": 1, "n_total": 35}
    changed = client.post(url, json=answer(trial, value=75))
    assert changed.status_code == 409 and "already answered with different ratings" in changed.json()["detail"]
    assert stored(app) == 1
    with app.state.sessions() as session:
        assert json.loads(session.scalar(select(Response.ratings_json))) == [25] * 10


@pytest.mark.parametrize(
    "pid, field",
    [
        (None, "prolific_pid: Field required"),
        ("", "prolific_pid: String should match pattern"),
        ("a b<script>", "prolific_pid: String should match pattern"),
        ("x" * 65, "prolific_pid: String should match pattern"),
    ],
)
def test_invalid_arrivals_are_refused(client, app, pid, field):
    body = {} if pid is None else {"prolific_pid": pid}
    reply = client.post("/api/session", json=body)
    assert reply.status_code == 422 and field in reply.json()["detail"]
    assert client.post("/api/session", json={"prolific_pid": "ok", "extra": 1}).status_code == 422
    with app.state.sessions() as session:
        assert session.execute(text("SELECT COUNT(*) FROM participants")).scalar() == 0


def _ratings(**changes):
    ratings = {d: 25 for d in DIGITS}
    ratings.update(changes)
    return ratings


INVALID_RESPONSES = [
    ({"position": 0}, 422, "position: Input should be greater than or equal to 1"),
    ({"position": 36}, 422, "position: must be between 1 and 35"),
    ({"position": "1"}, 422, "position: Input should be a valid integer"),
    ({"stimulus_id": "nonexistent"}, 422, "stimulus_id: 'nonexistent' is not the image shown at position"),
    ({"stimulus_id": "OTHER"}, 422, "is not the image shown at position"),
    ({"ratings": {d: 25 for d in DIGITS[:9]}}, 422, "ratings: no rating for category '9'"),
    ({"ratings": _ratings(dog=25)}, 422, "ratings: unknown category 'dog'"),
    ({"ratings": _ratings(**{"3": 30})}, 422, "ratings.3: 30 is not allowed; allowed values: 0, 25, 50, 75, 100"),
    ({"ratings": _ratings(**{"3": -25})}, 422, "ratings.3: -25 is not allowed"),
    ({"ratings": _ratings(**{"3": "25"})}, 422, "ratings.3: Input should be a valid integer"),
    ({"ratings": _ratings(**{"3": 25.0})}, 422, "ratings.3: Input should be a valid integer"),
    ({"ratings": _ratings(**{"3": True})}, 422, "ratings.3: Input should be a valid integer"),
    ({"ratings": None}, 422, "ratings: Input should be a valid dictionary"),
    ({"rt_ms": -1}, 422, "rt_ms"),
    ({"rt_ms": 1e12}, 422, "rt_ms"),
    ({"first_reaction_rt_ms": 3000}, 422, "first_reaction_rt_ms: must not exceed rt_ms"),
    ({"surprise": 1}, 422, "surprise: Extra inputs are not permitted"),
]


@pytest.mark.parametrize("change, status, message", INVALID_RESPONSES)
def test_invalid_responses_are_refused_and_store_nothing(client, app, change, status, message):
    state = start(client)
    trial = next(t for t in state["trials"] if t["stimulus_id"] not in INSTRUCTED)
    body = answer(trial)
    if change.get("stimulus_id") == "OTHER":
        change = {"stimulus_id": next(t["stimulus_id"] for t in state["trials"] if t is not trial)}
    body.update(change)
    reply = client.post(f"/api/sessions/{state['token']}/responses", json=body)
    assert reply.status_code == status, reply.text
    assert message in reply.json()["detail"]
    assert stored(app) == 0


def test_missing_fields_are_named(client, app):
    state = start(client)
    reply = client.post(f"/api/sessions/{state['token']}/responses", json={"position": 1})
    detail = reply.json()["detail"]
    assert reply.status_code == 422
    for name in ("stimulus_id", "ratings", "rt_ms", "first_reaction_rt_ms"):
        assert f"{name}: Field required" in detail
    assert (
        client.post(
            f"/api/sessions/{state['token']}/responses",
            content=b"not json",
            headers={"content-type": "application/json"},
        ).status_code
        == 422
    )
    assert stored(app) == 0


def test_unknown_session_and_missing_consent(client, app):
    state = start(client, consent=False)
    trial = state["trials"][0]
    unknown = client.post("/api/sessions/not-a-token/responses", json=answer(trial))
    assert unknown.status_code == 404 and "unknown session" in unknown.json()["detail"]
    assert client.post("/api/sessions/not-a-token/complete").status_code == 404
    no_consent = client.post(f"/api/sessions/{state['token']}/responses", json=answer(trial))
    assert no_consent.status_code == 409 and "consent" in no_consent.json()["detail"]
    refused = client.post(f"/api/sessions/{state['token']}/consent", json={"consent": False})
    assert refused.status_code == 422 and "consent: must be true" in refused.json()["detail"]
    assert stored(app) == 0


def test_admin_token_is_required(client, small_bundle, tmp_path):
    assert client.get("/admin/responses.csv").status_code == 401
    assert admin(client, "/admin/responses.csv", token="wrong").status_code == 401
    basic = client.get("/admin/responses.csv", headers={"Authorization": f"Basic {TOKEN}"})
    assert basic.status_code == 401 and basic.headers["www-authenticate"] == "Bearer"
    for path in ("/admin/responses.csv", "/admin/attention.csv", "/admin/participants.csv"):
        assert admin(client, path).status_code == 200
    no_admin = create_app(
        ServeStudySettings(
            study_dir=str(small_bundle), completion_code=CODE, database_url=f"sqlite:///{tmp_path / 'other.db'}"
        )
    )
    with TestClient(no_admin) as other:
        reply = admin(other, "/admin/responses.csv")
        assert reply.status_code == 403 and "disabled" in reply.json()["detail"]


def test_admin_export_from_its_child_process_equals_the_in_process_table(client, app, small_bundle):
    finish(client, start(client, "alice"))
    partial = start(client, "carol")
    client.post(f"/api/sessions/{partial['token']}/responses", json=answer(partial["trials"][0]))
    bundle = load_bundle(small_bundle)
    for name, (columns, rows) in TABLES.items():
        reply = admin(client, f"/admin/{name}?include_incomplete=true")
        with app.state.sessions() as session:
            expected = csv_text(columns, rows(session, bundle, True, QualitySettings()))
        assert reply.status_code == 200, reply.text
        assert reply.text == expected and expected.count("\n") > 1  # answers, not just a header


def test_admin_export_is_pnas_format_and_readable_by_the_analysis(client, small_bundle, tmp_path):
    bundle = load_bundle(small_bundle)
    finish(client, start(client, "alice"), value=0)
    assert finish(client, start(client, "bob"), value=100).status_code == 200
    partial = start(client, "carol")
    client.post(f"/api/sessions/{partial['token']}/responses", json=answer(partial["trials"][0]))

    reply = admin(client, "/admin/responses.csv")
    assert reply.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(reply.text)))
    assert tuple(reply.text.splitlines()[0].split(",")) == RESPONSE_COLUMNS
    assert {r["subject"] for r in rows} == {"P0001", "P0002"}  # carol is incomplete
    assert len(rows) == 2 * 33 * 10  # 33 rated trials (35 minus 2 attention checks) x 10 categories
    alice = [r for r in rows if r["subject"] == "P0001"]
    assert {r["category_rating"] for r in alice} == {"0"}
    assert sorted({int(r["trial"]) for r in alice}) == list(range(1, 34))
    assert sum(r["image_repetition"] == "1" for r in alice) == 3 * 10
    by_image = {e.image: e for e in bundle.key.values() if e.image}
    for row in alice:
        entry = by_image[row["image"]]
        if entry.kind == "controversial":
            assert (row["targeted_model_1"], row["targeted_class_1"]) == (entry.model_a, entry.class_a_name)
            assert (row["targeted_model_2"], row["targeted_class_2"]) == (entry.model_b, entry.class_b_name)
        else:
            assert entry.kind == "natural" and row["image"].startswith("MNIST_") and not row["targeted_model_1"]
    path = tmp_path / "responses.csv"
    path.write_text(reply.text)
    table = read_human_ratings(path)
    assert len(table.rows) == len(rows)

    with_partial = admin(client, "/admin/responses.csv?include_incomplete=true").text
    assert "P0003" in with_partial
    attention_text = admin(client, "/admin/attention.csv").text
    attention = list(csv.DictReader(io.StringIO(attention_text)))
    assert len(attention) == 4 and all(r["passed"] == "true" for r in attention)
    (tmp_path / "attention.csv").write_text(attention_text)
    assert read_attention(tmp_path / "attention.csv") == {"P0001": (2, 2), "P0002": (2, 2)}
    participants = list(csv.DictReader(io.StringIO(admin(client, "/admin/participants.csv").text)))
    assert [(p["prolific_pid"], p["status"]) for p in participants] == [
        ("alice", "completed"),
        ("bob", "completed"),
        ("carol", "in_progress"),
    ]
    assert participants[0]["attention_passed"] == "2"


def test_internal_errors_show_no_stack_trace(small_bundle, tmp_path):
    app = create_app(
        ServeStudySettings(
            study_dir=str(small_bundle),
            completion_code=CODE,
            allow_test_ids=True,
            database_url=f"sqlite:///{tmp_path / 'broken.db'}",
        )
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        state = start(client)
        with app.state.engine.begin() as connection:
            connection.exec_driver_sql("DROP TABLE responses")
        reply = client.post(f"/api/sessions/{state['token']}/responses", json=answer(state["trials"][0]))
        assert reply.status_code == 500
        assert reply.json() == {"detail": "internal server error; your earlier answers are saved, please retry"}


def test_concurrent_first_visits_and_duplicate_answers_store_one_row(app):
    from concurrent.futures import ThreadPoolExecutor

    twin = {"prolific_pid": "twin", "session_id": "twin-submission"}

    def arrive(_):
        return TestClient(app).post("/api/session", json=twin).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(arrive, range(8))) == {200}
    with app.state.sessions() as session:
        assert session.execute(text("SELECT COUNT(*) FROM participants")).scalar() == 1
    client = TestClient(app)
    state = client.post("/api/session", json=twin).json()  # same submission, no secret: the session moves here
    token = state["token"]
    client.post(f"/api/sessions/{token}/consent", json={"consent": True})
    trial = state["trials"][0]

    def send(_):
        return TestClient(app).post(f"/api/sessions/{token}/responses", json=answer(trial)).json()["status"]

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(send, range(8)))
    assert statuses == ["duplicate"] * 7 + ["stored"]
    assert stored(app) == 1
    with app.state.sessions() as session:
        assert session.execute(text("SELECT COUNT(*) FROM participants")).scalar() == 1
