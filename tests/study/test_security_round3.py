"""The attacks of issue 58 (third round) on the study server, each replayed and held (items 8-13; the attention
checks, repeats and IPv6 floods, items 5-7, are in ``test_security_presentations.py`` and ``test_security_flood.py``).

8 a completed row re-bound by its token, 9 uvicorn's own 400s without the security headers, 10 the admin
token echoed by Hydra under other spellings of its key, 11 refused answers logged without bound, 12 categories
the answer schema cannot carry, 13 participant ids a spreadsheet reads as numbers or errors.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep
from sqlalchemy import select

from controversial.errors import UserError
from controversial.records.csvfile import csv_text, open_rows
from controversial.study.bundle import BundleError, load_bundle
from controversial.study.db import Participant
from controversial.study.export import ExportOptions, export_study
from controversial.study.guards import SECURITY_HEADERS
from controversial.study.http_protocol import GuardedH11Protocol, GuardedHttpToolsProtocol, uvicorn_config
from controversial.study.log_throttle import LogThrottle
from controversial.study.scripted_participants import take_study
from controversial.study.server import ServeStudySettings, create_app
from controversial.tasks.serve_study import before_hydra

from .conftest import SMALL
from .production_app import ADMIN, answer, arrive, ids, make_app, server_log

REPO = Path(__file__).resolve().parents[2]


# 8. A completed row is frozen --------------------------------------------------------------------------------


def test_8_a_completed_rows_token_cannot_rebind_it_to_another_session_id(client, app, small_bundle):
    pid, session_id = ids(80)
    done = take_study(client, pid, random.Random(81), session_id=session_id)
    assert done.redirect_url.endswith("cc=CODE")
    other_session = ids(82)[1]
    moved = arrive(client, pid, other_session, token=done.token)  # the attack: the token with another SESSION_ID
    assert moved.status_code == 200 and moved.json()["status"] == "completed"
    real = arrive(client, pid, session_id)  # the real link afterwards: the same completed row, no second one
    assert real.json()["status"] == "completed"
    with app.state.sessions() as session:
        rows = session.scalars(select(Participant).where(Participant.prolific_pid == pid)).all()
        assert [row.prolific_session_id for row in rows] == [session_id]
    assert rows[0].completed_at is not None  # one completed row: no second row for pid_conflict to prefer


# 9. Every byte the server sends carries the security headers -------------------------------------------------

REFUSED_REQUESTS = {
    "100 kB path": b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "garbage request line": b"GARBAGE\x01\x02 !!\r\n\r\n",
    "bad header name": b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n",
    "Content-Length with Transfer-Encoding": (
        b"POST /api/session HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
}
PROTOCOLS = [GuardedH11Protocol] + ([GuardedHttpToolsProtocol] if GuardedHttpToolsProtocol else [])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        reply = b""
        while chunk := connection.recv(1 << 16):
            reply += chunk
            if b"\r\n\r\n" in reply and b"connection: close" not in reply.lower():
                break  # a keep-alive reply (the app's own): its headers are what is checked
        return reply


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_9_requests_the_parser_refuses_get_the_security_headers_too(small_bundle, tmp_path, protocol, caplog):
    import uvicorn

    app = make_app(small_bundle, tmp_path)
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", _free_port(), protocol=protocol, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive()
        time.sleep(0.02)
    try:
        with caplog.at_level(logging.INFO):
            replies = {name: _raw(server.config.port, request) for name, request in REFUSED_REQUESTS.items()}
            replies.update({f"garbage {n}": _raw(server.config.port, b"\x00\r\n\r\n") for n in range(30)})
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        app.state.engine.dispose()
    statuses = set()
    for name, reply in replies.items():
        head = reply.split(b"\r\n\r\n", 1)[0].lower()
        statuses.add(head.split(b"\r\n", 1)[0])
        for header, value in SECURITY_HEADERS:
            assert header + b": " + value.lower() in head, (name, header)
        assert b"cache-control: no-store" in head, name
    assert any(b" 400 " in status for status in statuses)  # the parser's own refusals were among them
    logged = [r for r in caplog.records if r.getMessage().startswith("Invalid HTTP request")]
    assert len(logged) <= 1  # one line a minute for every refusal, not one each


# 10. No spelling of the admin token's key reaches Hydra ------------------------------------------------------

SPELLINGS = [
    "admin_token@_global_",
    "admin_token@_here_",
    "'admin_token'",
    "admin_token ",
    "+admin_token@_global_",
    "rate_limit.admin_token",
    "ADMIN-TOKEN",
    "--admin_token",
]


@pytest.mark.parametrize("key", SPELLINGS)
def test_10_every_spelling_of_the_admin_token_key_is_refused_before_hydra(key):
    secret = "typed-on-the-command-line-0123456789abcdef"
    with pytest.raises(UserError, match="admin_token_file") as refused:
        before_hydra(["study_dir=x", f"{key}={secret}"])
    assert secret not in str(refused.value)
    before_hydra(["admin_token_file=/tmp/t", "study_dir=admin_token"])  # the file option and values pass


@pytest.mark.slow  # a process of its own (the unit test above covers every spelling)
def test_10_hydra_never_sees_a_packaged_admin_token(small_bundle, tmp_path):
    secret = "typed-on-the-command-line-0123456789abcdef"
    run = tmp_path / "run"
    command = [sys.executable, "serve_study.py", f"study_dir={small_bundle}", f"admin_token@_global_={secret}"]
    result = subprocess.run([*command, f"hydra.run.dir={run}"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2 and secret not in result.stderr + result.stdout and not run.exists()
    assert "admin_token_file" in result.stderr


# 11. Refused answers: one log line per session a minute, with the count --------------------------------------


def test_11_a_flood_of_refused_answers_writes_a_bounded_log(client, app, caplog):
    state = arrive(client, *ids(110)).json()
    token, trial = state["token"], state["trials"][0]
    client.post(f"/api/sessions/{token}/consent", json={"consent": True})
    assert answer(client, token, trial, value=25).status_code == 201
    caplog.clear()
    with caplog.at_level(logging.INFO):
        refused = [answer(client, token, trial, value=50).status_code for _ in range(200)]
    assert refused == [409] * 200
    lines = [r.getMessage() for r in server_log(caplog) if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "1 different answer(s)" in lines[0]  # the first, then held back for a minute
    with app.state.sessions() as session:
        assert session.scalar(select(Participant.n_refused)) == 200  # the database keeps the exact count


def test_11_held_back_events_are_reported_with_the_next_line_and_lines_are_capped_overall():
    now = [0.0]
    throttle = LogThrottle(interval_s=60, max_lines=3, clock=lambda: now[0])
    assert [throttle.due("a") for _ in range(5)] == [1, 0, 0, 0, 0]
    now[0] = 61
    assert throttle.due("a") == 5  # this one and the four held back
    assert [throttle.due(k) for k in "bcde"] == [1, 1, 0, 0]  # three lines in this interval, then none
    now[0] = 122
    assert throttle.due("d") == 2 and throttle.due("e") == 2


# 12. Categories the server could not accept are refused at export ---------------------------------------------


@pytest.mark.parametrize(
    ("categories", "message"),
    [([f"class {i}" for i in range(300)], "at most 256"), (["x" * 65] + [str(d) for d in range(1, 10)], "1 to 64")],
    ids=["300 categories", "65 characters"],
)
def test_12_the_export_refuses_categories_the_answers_cannot_carry(tmp_path, monkeypatch, categories, message):
    """A sweep of an imported model records its dataset's class names; here they are too many or too long."""
    from controversial.study import export as export_module

    recorded = export_module.recorded_classes

    def renamed(sweep_dir, stimuli):
        return dataclasses.replace(recorded(sweep_dir, stimuli), class_names=tuple(categories))

    monkeypatch.setattr(export_module, "recorded_classes", renamed)
    sweep = make_sweep(tmp_path / "sweep")
    with pytest.raises(BundleError, match=message):
        export_study(sweep, tmp_path / "studies", ExportOptions(name="many", **SMALL), fake_mnist_test, WEB_SOURCE)
    assert not (tmp_path / "studies").exists() or not list((tmp_path / "studies").rglob("*.png"))


def test_12_a_bundle_with_such_categories_is_refused_by_the_server(small_bundle, tmp_path):
    import json
    import shutil

    copy = tmp_path / "pilot" / "v1"
    shutil.copytree(small_bundle, copy)
    spec = json.loads((copy / "study.json").read_text())
    spec["categories"] = ["y" * 65] + spec["categories"][1:]
    (copy / "study.json").write_text(json.dumps(spec))
    with pytest.raises(BundleError, match="at most|1 to 64"):
        load_bundle(copy)


# 13. Participant ids that read as numbers or errors are written as text --------------------------------------

NUMERIC_PIDS = ["-inf", "-nan", "-1e5", "+1", "-0.5"]


def test_13_numeric_looking_pilot_ids_stay_text_in_the_export(small_bundle, tmp_path):
    settings = ServeStudySettings(
        study_dir=str(small_bundle),
        completion_code="C0DE",
        database_url=f"sqlite:///{tmp_path / 'responses.db'}",
        allow_test_ids=True,
    )
    app = create_app(settings, ADMIN)
    with TestClient(app) as client:
        for k, pid in enumerate(NUMERIC_PIDS[:3]):  # the ids the server accepts in test mode ([A-Za-z0-9_-])
            take_study(client, pid, random.Random(k), session_id=f"s{k}")
        text = client.get("/admin/participants.csv", headers={"Authorization": f"Bearer {ADMIN}"}).text
    app.state.engine.dispose()
    cells = sorted(row["prolific_pid"] for row in csv.DictReader(io.StringIO(text)))
    assert cells == ["'-1e5", "'-inf", "'-nan"]  # what a spreadsheet shows as the text typed


def test_13_identifier_cells_are_escaped_and_read_back_exactly(tmp_path):
    from controversial.records.csvfile import Text

    rows = [[Text(pid), pid, float("-inf"), -0.5] for pid in NUMERIC_PIDS]
    text = csv_text(["pid", "plain", "float", "number"], rows)
    lines = text.splitlines()[1:]
    assert [line.split(",")[0] for line in lines] == ["'-inf", "'-nan", "'-1e5", "'+1", "'-0.5"]
    assert [line.split(",")[1] for line in lines] == ["'-inf", "'-nan", "-1e5", "+1", "-0.5"]  # numbers as numbers
    assert {line.split(",", 3)[2] for line in lines} == {"'-inf"}  # a spreadsheet runs -inf as a formula
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    assert [record["pid"] for _, record in open_rows(path, ["pid"])] == NUMERIC_PIDS
