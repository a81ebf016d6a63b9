"""Stimuli at a visual angle without a browser: the screening rule, the calibration endpoint's states, the duration
estimate, and that a study sized in pixels is untouched."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep

from controversial.study.bundle import load_bundle
from controversial.study.calibration import screen
from controversial.study.export import ExportOptions, export_study
from controversial.study.schemas import CalibrationRequest
from controversial.study.scripted_participants import instructions
from controversial.study.server import ServeStudySettings, create_app

SMALL = dict(per_pair=10, natural_per_class=1, n_repeats=0, n_attention=0, n_demo=0, pilot=True)


def measured(px_per_degree=35.0, distance=550.0, width=1280, height=800) -> CalibrationRequest:
    return CalibrationRequest(
        px_per_degree=px_per_degree, viewing_distance_mm=distance, window_width=width, window_height=height
    )


def test_the_screening_rule():
    assert screen(measured(), 8).screened_out is None and screen(measured(), 8).stimulus_px == 280
    assert screen(measured(distance=150), 8).screened_out == "calibration_failed"
    assert screen(measured(distance=2000), 8).screened_out == "calibration_failed"
    too_small = screen(measured(height=600), 18)  # 630 px does not fit a 600-pixel window
    assert too_small.screened_out == "screen_too_small" and "630 x 630 pixels" in too_small.message


@pytest.fixture(scope="module")
def degrees_bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("degrees")
    options = ExportOptions(name="deg", display={"degrees": 8.0}, duration={"seconds_per_trial": 6.0}, **SMALL)
    return export_study(make_sweep(root / "sweep"), root / "studies", options, fake_mnist_test, WEB_SOURCE)


def _client(bundle, database_url):
    settings = ServeStudySettings(
        study_dir=str(bundle), completion_code="C0DE", database_url=database_url, allow_test_ids=True
    )
    return create_app(settings, None)


def _consented(client) -> dict:
    state = client.post("/api/session", json={"prolific_pid": "p1", "session_id": "s1"}).json()
    assert client.post(f"/api/sessions/{state['token']}/consent", json={"consent": True, "browser": {}}).status_code
    return state


def test_the_calibration_is_stored_and_gates_completion(degrees_bundle, database_url):
    assert load_bundle(degrees_bundle).spec.display_degrees == 8.0
    app = _client(degrees_bundle, database_url)
    with TestClient(app) as client:
        assert client.get("/api/study").json()["display_degrees"] == 8.0
        state = _consented(client)
        token = state["token"]
        assert state["px_per_degree"] is None
        categories = client.get("/api/study").json()["categories"]
        for trial in state["trials"]:
            body = {"position": trial["position"], "stimulus_id": trial["stimulus_id"], "rt_ms": 3000.0}
            body |= {"ratings": dict.fromkeys(categories, 0), "first_reaction_rt_ms": 500.0}
            client.post(f"/api/sessions/{token}/responses", json=body)
        refused = client.post(f"/api/sessions/{token}/complete")
        assert refused.status_code == 409 and "calibration" in refused.json()["detail"]
        body = measured().model_dump()
        assert client.post(f"/api/sessions/{token}/calibration", json=body).json()["status"] == "ok"
        resumed = client.post("/api/session", json={"prolific_pid": "p1", "session_id": "s1", "token": token}).json()
        assert resumed["px_per_degree"] == 35.0
        assert client.post(f"/api/sessions/{token}/complete").status_code == 200
        assert client.post("/api/sessions/not-a-token/calibration", json=body).status_code == 404
        assert client.post("/api/preview/calibration", json=measured(distance=100).model_dump()).json()["reason"] == (
            "calibration_failed"
        )
    app.state.engine.dispose()


def test_a_screened_out_participant_stays_out(degrees_bundle, database_url):
    app = _client(degrees_bundle, database_url)
    with TestClient(app) as client:
        token = _consented(client)["token"]
        out = client.post(f"/api/sessions/{token}/calibration", json=measured(height=250).model_dump()).json()
        assert out["status"] == "screened_out" and out["reason"] == "screen_too_small"
        again = client.post(f"/api/sessions/{token}/calibration", json=measured().model_dump()).json()
        assert again["reason"] == "screen_too_small"  # no second try
        arrival = client.post("/api/session", json={"prolific_pid": "p1", "session_id": "s1", "token": token}).json()
        assert arrival["status"] == "screened_out" and "too small" in arrival["message"]
        assert client.post(f"/api/sessions/{token}/complete").status_code == 409
    app.state.engine.dispose()


def test_a_study_in_pixels_has_no_calibration(small_bundle, database_url):
    app = _client(small_bundle, database_url)
    with TestClient(app) as client:
        assert client.get("/api/study").json()["display_degrees"] is None
        token = _consented(client)["token"]
        refused = client.post(f"/api/sessions/{token}/calibration", json=measured().model_dump())
        assert refused.status_code == 409 and "pixels" in refused.json()["detail"]
    app.state.engine.dispose()


def test_the_duration_estimate_includes_the_calibration(degrees_bundle, small_bundle):
    with_calibration = load_bundle(degrees_bundle).spec.provenance["duration"]
    from controversial.study.duration import DurationOptions, estimate_duration

    plain = estimate_duration(DurationOptions(seconds_per_trial=6.0), 20, [])
    calibrated = estimate_duration(DurationOptions(seconds_per_trial=6.0), 20, [], calibrated=True)
    assert calibrated.minutes == plain.minutes + 2 and "screen calibration" in calibrated.summary()
    assert with_calibration["minutes"] >= 2 and instructions(load_bundle(degrees_bundle)) == {}
