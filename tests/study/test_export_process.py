"""The admin export runs in a child process (its output is checked against the in-process table in
test_server_api.py): a child that fails is an error (before the response: a 500 with the reason; midway:
a broken transfer), and nothing secret travels on its command line."""

from __future__ import annotations

import shutil

import anyio
import pytest
from fastapi.testclient import TestClient

from controversial.study import export_process
from controversial.study.export_process import ExportFailed, ExportRequest, TableExport, table_chunks
from controversial.study.server import ServeStudySettings, create_app

TOKEN = "test-admin-token-0123456789-abcdefghijkl"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def _app(bundle_dir, database_url: str):
    settings = ServeStudySettings(
        study_dir=str(bundle_dir), completion_code="C0DE", database_url=database_url, allow_test_ids=True
    )
    return create_app(settings, TOKEN)


def test_a_child_that_cannot_start_is_a_500_with_its_reason(small_bundle, tmp_path) -> None:
    bundle_dir = shutil.copytree(small_bundle, tmp_path / "copy" / "v1")
    app = _app(bundle_dir, f"sqlite:///{tmp_path / 'responses.db'}")
    shutil.rmtree(bundle_dir)  # the child loads the bundle afresh; the server already has it in memory
    with TestClient(app) as client:
        reply = client.get("/admin/responses.csv", headers=ADMIN)
    assert reply.status_code == 500 and reply.json()["detail"].startswith("export failed: ")
    app.state.engine.dispose()


def test_a_child_that_fails_midway_aborts_the_stream(small_bundle, tmp_path, monkeypatch) -> None:
    request = ExportRequest(str(small_bundle), f"sqlite:///{tmp_path / 'r.db'}", "responses.csv")

    async def export_all() -> bytes:
        export = await TableExport.start(request)
        return b"".join([chunk async for chunk in export.chunks()])

    real_open_process = anyio.open_process

    async def fake_open_process(command, **kwargs):  # a child that writes part of a table, then fails
        script = "cat > /dev/null; head -c 10 /dev/zero; echo 'RuntimeError: disk gone' >&2; exit 3"
        return await real_open_process(["sh", "-c", script], **kwargs)

    monkeypatch.setattr(export_process.anyio, "open_process", fake_open_process)
    with pytest.raises(ExportFailed, match="disk gone"):
        anyio.run(export_all)


def test_a_child_that_dies_before_reading_its_request_reports_why(small_bundle, tmp_path, monkeypatch) -> None:
    """A child that fails at start-up (an import error) closes its stdin before the request is written: that is
    an ExportFailed with the child's reason, not a broken-pipe error (CI met this race under load)."""
    request = ExportRequest(str(small_bundle), f"sqlite:///{tmp_path / 'r.db'}", "responses.csv")
    real_open_process = anyio.open_process

    async def fake_open_process(command, **kwargs):  # already gone when the request is sent
        process = await real_open_process(["sh", "-c", "echo 'ImportError: no torch here' >&2; exit 1"], **kwargs)
        await process.wait()
        return process

    monkeypatch.setattr(export_process.anyio, "open_process", fake_open_process)
    with pytest.raises(ExportFailed, match="no torch here"):
        anyio.run(TableExport.start, request)


def test_the_request_travels_on_stdin_not_the_command_line(small_bundle, monkeypatch) -> None:
    secret_url = "postgresql+psycopg://study:s3cret-password@db-host/study"
    commands = []
    real_open_process = anyio.open_process

    async def recording_open_process(command, **kwargs):
        commands.append(list(command))
        return await real_open_process(command, **kwargs)

    monkeypatch.setattr(export_process.anyio, "open_process", recording_open_process)

    async def start() -> None:
        await TableExport.start(ExportRequest(str(small_bundle), secret_url, "responses.csv"))

    with pytest.raises(ExportFailed):  # no such database server: the child reports why
        anyio.run(start)
    assert commands and not any("s3cret" in part for part in commands[0])


def test_table_chunks_names_the_tables_it_knows(small_bundle, tmp_path) -> None:
    with pytest.raises(ExportFailed, match="available: responses.csv"):
        list(table_chunks(ExportRequest(str(small_bundle), f"sqlite:///{tmp_path / 'r.db'}", "secrets.csv")))


def test_an_in_memory_database_is_refused(small_bundle) -> None:
    with pytest.raises(ValueError, match="in-memory database"):
        _app(small_bundle, "sqlite://")
