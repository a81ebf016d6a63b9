"""The admin export, built in a child process so that it never holds the study server's GIL.

Formatting a large table is CPU-bound Python. In a thread of the server it took the GIL from the answer
path: every SQLite call an answer makes gives the GIL up and then waits up to the 5 ms switch interval to
get it back, so while a 5.5 MB export streamed, answer latency rose from p50 4.6 ms to 38 ms (p99 24 ->
109 ms) on this project's 2-core load test. A child process has its own interpreter, and it runs at a
lower CPU priority (nice 10), so participants get the cores first.

The request travels on the child's stdin, never on its command line: a database URL may hold a
password, and command lines are visible to every user of the machine (``ps``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process

import controversial
from controversial.records.csvfile import csv_chunks
from controversial.study.bundle import load_bundle
from controversial.study.pnas_export import TABLES, snapshot
from controversial.study.quality import QualitySettings

log = logging.getLogger(__name__)

EXPORT_NICENESS = 10  # added to the server's: the export waits for the cores, participants do not


class ExportFailed(RuntimeError):
    """The child process could not build the table; the message is its own one-line reason."""


@dataclass(frozen=True)
class ExportRequest:
    """Which table of which study, from which database, with the quality thresholds of its flags."""

    bundle_dir: str
    database_url: str
    table: str
    include_incomplete: bool = False
    quality: QualitySettings = field(default_factory=QualitySettings)

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "quality": self.quality.model_dump()}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ExportRequest:
        fields = json.loads(data)
        return cls(**{**fields, "quality": QualitySettings(**fields["quality"])})


def table_chunks(request: ExportRequest) -> Iterator[str]:
    """The table's CSV text in pieces, all read from one database snapshot."""
    if request.table not in TABLES:
        raise ExportFailed(f"no such export {request.table!r}; available: {', '.join(TABLES)}")
    columns, rows = TABLES[request.table]
    bundle = load_bundle(request.bundle_dir)
    with snapshot(request.database_url) as session:
        yield from csv_chunks(columns, rows(session, bundle, request.include_incomplete, request.quality))


class TableExport:
    """A running child process that writes one table to its stdout; started by :meth:`start`."""

    def __init__(self, process: Process, first_chunk: bytes) -> None:
        self._process = process
        self._first_chunk = first_chunk

    @classmethod
    async def start(cls, request: ExportRequest) -> TableExport:
        """Start the child and wait for its first bytes, so that a failure to start (an unreadable
        database, a broken bundle) is reported before the response begins, as an ``ExportFailed``."""
        paths = (str(Path(controversial.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}  # works from a source checkout
        process = await anyio.open_process(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert process.stdin is not None
            try:
                await process.stdin.send(request.to_json())
                await process.stdin.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):  # it died before reading the request
                await _check_exit(process)
                raise ExportFailed("the export process exited before reading its request") from None
            first_chunk = await _receive(process)
            if not first_chunk:
                await _check_exit(process)
        except BaseException:
            await _stop(process)
            raise
        return cls(process, first_chunk)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The CSV bytes as the child writes them. A child that fails midway raises here, which aborts the
        response: the client sees a broken transfer, never a table that silently ends early."""
        try:
            chunk = self._first_chunk
            while chunk:
                yield chunk
                chunk = await _receive(self._process)
            await _check_exit(self._process)
        finally:
            await _stop(self._process)


async def _receive(process: Process) -> bytes:
    """The next piece of the child's stdout; ``b""`` at its end."""
    assert process.stdout is not None
    try:
        return await process.stdout.receive(1 << 16)
    except anyio.EndOfStream:
        return b""


async def _check_exit(process: Process) -> None:
    if await process.wait() != 0:
        assert process.stderr is not None
        try:
            reason = (await process.stderr.receive(1 << 16)).decode(errors="replace").strip()
        except anyio.EndOfStream:
            reason = ""
        log.error("admin export failed: %s", reason or f"exit status {process.returncode}")
        raise ExportFailed(reason.splitlines()[-1] if reason else f"export process exited with {process.returncode}")


async def _stop(process: Process) -> None:
    """Kill a child that is still running (the client went away) and reap it."""
    if process.returncode is None:
        process.kill()
    with anyio.CancelScope(shield=True):
        await process.wait()
        await process.aclose()


def main() -> int:
    """The child: read the request from stdin, write the table to stdout."""
    os.nice(EXPORT_NICENESS)
    try:
        request = ExportRequest.from_json(sys.stdin.buffer.read())
        for chunk in table_chunks(request):
            sys.stdout.buffer.write(chunk.encode())
            sys.stdout.buffer.flush()
    except Exception as error:  # one line for the server's log and the admin's error reply
        print(f"{type(error).__name__}: {error}".replace("\n", " "), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
