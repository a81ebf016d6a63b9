"""The study app with production settings, and the participant's requests the security tests replay against it
(shared by the security rounds; their ``app`` and ``client`` fixtures are in ``conftest.py``)."""

from __future__ import annotations

import csv
import io
import logging
import random
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx import Response

from controversial.study.scripted_participants import prolific_like_id
from controversial.study.server import ServeStudySettings, create_app

ADMIN = "round-two-admin-token-0123456789abcdefghijkl"
DIGITS = [str(d) for d in range(10)]


def make_app(small_bundle: Path, tmp_path: Path, **options) -> FastAPI:
    """The app with production settings (Prolific-format ids), ``options`` overriding them."""
    url = f"sqlite:///{tmp_path / 'responses.db'}"
    return create_app(
        ServeStudySettings(study_dir=str(small_bundle), completion_code="CODE", database_url=url, **options), ADMIN
    )


def ids(seed: int) -> tuple[str, str]:
    rng = random.Random(seed)
    return prolific_like_id(rng), prolific_like_id(rng)


def arrive(client: TestClient, pid: str, session_id: str, token: str | None = None) -> Response:
    body = {"prolific_pid": pid, "study_id": "a" * 24, "session_id": session_id, **({"token": token} if token else {})}
    return client.post("/api/session", json=body)


def answer(client: TestClient, token: str, trial: dict, value: int = 25) -> Response:
    body = {
        "position": trial["position"],
        "stimulus_id": trial["stimulus_id"],
        "ratings": {d: value for d in DIGITS},
        "rt_ms": 2500,
        "first_reaction_rt_ms": 0,
    }
    return client.post(f"/api/sessions/{token}/responses", json=body)


def server_log(caplog) -> list[logging.LogRecord]:
    """What the server logged (the test client's own httpx log lines left out)."""
    return [r for r in caplog.records if not r.name.startswith("httpx")]


def participants_csv(client: TestClient) -> list[dict[str, str]]:
    reply = client.get("/admin/participants.csv", headers={"Authorization": f"Bearer {ADMIN}"})
    assert reply.status_code == 200, reply.text
    return list(csv.DictReader(io.StringIO(reply.text)))
