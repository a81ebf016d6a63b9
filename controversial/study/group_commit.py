"""Group commit: the answers waiting at one moment are written in one transaction, acknowledged after its commit.

Why: with ``synchronous=FULL`` every SQLite commit waits for an fsync (about 4 ms on the reference
machine) and SQLite has one writer at a time, so one commit per answer caps a study at a few hundred
answers a second with no Python at all, and it held the server's one connection through each request's
Python work (docs/human_study.md, section 7). Here the jobs queued while a batch commits form the next
batch: one BEGIN, every job's statements, one COMMIT (one fsync), and only then each job's result is
handed back, so an acknowledged answer is exactly as durable as with a commit of its own.

Where the work runs: taking the connection, BEGIN (which may wait for the write lock) and COMMIT (the
fsync) run in a worker thread; on SQLite, whose statements are in-process calls of microseconds once the
write lock is held, the jobs' statements run on the event loop itself. A writer thread that ran them
instead had to win the GIL back from the busy event loop after every statement (up to the 5 ms switch
interval each), which made answers wait tens to hundreds of ms under load. Other databases answer over
the network, so there the jobs run in the worker thread too.

A job reports a client error by raising one of ``client_errors`` before it writes anything; that fails
its own request only. Any other exception, or a failed commit, rolls the whole batch back and fails every
job in it (the pages retry a 5xx): nothing of that batch was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from sqlalchemy import Connection, Engine, RootTransaction

log = logging.getLogger(__name__)
T = TypeVar("T")
Job = Callable[[Connection], Any]


@dataclass
class _Queue:
    """The jobs waiting on one event loop, and the task that writes them."""

    pending: list[tuple[Job, asyncio.Future]] = field(default_factory=list)
    flusher: asyncio.Task | None = None


class GroupCommitWriter:
    """``await writer.run(job)`` returns ``job(connection)`` once the transaction it ran in has committed."""

    def __init__(self, engine: Engine, client_errors: tuple[type[Exception], ...] = ()) -> None:
        self._engine, self._client_errors = engine, client_errors
        self._in_loop = engine.dialect.name == "sqlite"
        # One queue per event loop: a server has one; test clients may run requests on several.
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = weakref.WeakKeyDictionary()

    async def run(self, job: Callable[[Connection], T]) -> T:
        """Queue ``job`` for the next batch; its result (or error) once the batch has committed."""
        loop = asyncio.get_running_loop()
        waiting = self._queues.get(loop)
        if waiting is None:
            waiting = self._queues[loop] = _Queue()
        done = loop.create_future()
        waiting.pending.append((job, done))
        if waiting.flusher is None:
            waiting.flusher = loop.create_task(self._flush(waiting))
        return await done

    async def _flush(self, waiting: _Queue) -> None:
        try:
            while waiting.pending:
                batch, waiting.pending = waiting.pending, []
                await self._write(batch)
        finally:
            waiting.flusher = None

    async def _write(self, batch: list[tuple[Job, asyncio.Future]]) -> None:
        try:
            connection, transaction = await asyncio.to_thread(self._begin)
        except Exception as error:  # e.g. the database is unreachable or locked for longer than busy_timeout
            log.exception("could not begin a batch of %d answers", len(batch))
            _fail(batch, error)
            return
        try:
            if self._in_loop:
                outcomes = self._run_jobs(connection, batch)
            else:
                outcomes = await asyncio.to_thread(self._run_jobs, connection, batch)
            await asyncio.to_thread(_commit, connection, transaction)
        except Exception as error:  # rolled back: nothing in this batch was acknowledged
            log.exception("a batch of %d answers was rolled back", len(batch))
            await asyncio.to_thread(_roll_back, connection, transaction)
            _fail(batch, error)
            return
        for (succeeded, value), (_, done) in zip(outcomes, batch):
            if done.done():  # its request was cancelled meanwhile
                continue
            if succeeded:
                done.set_result(value)
            else:
                done.set_exception(value)

    def _begin(self) -> tuple[Connection, RootTransaction]:
        connection = self._engine.connect()
        try:
            return connection, connection.begin()
        except BaseException:
            connection.close()
            raise

    def _run_jobs(self, connection: Connection, batch: list[tuple[Job, asyncio.Future]]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        for job, _ in batch:
            try:
                outcomes.append((True, job(connection)))
            except self._client_errors as error:  # refused before writing: only this request fails
                outcomes.append((False, error))
        return outcomes


def _commit(connection: Connection, transaction: RootTransaction) -> None:
    try:
        transaction.commit()
    except BaseException:  # SQLAlchemy leaves the driver's transaction open: discard the connection, which
        connection.invalidate()  # closes it and so rolls the batch back, rather than reuse it
        raise
    finally:
        connection.close()


def _roll_back(connection: Connection, transaction: RootTransaction) -> None:
    if connection.closed:  # a failed commit discarded it
        return
    try:
        if transaction.is_active:
            transaction.rollback()
    finally:
        connection.close()


def _fail(batch: list[tuple[Job, asyncio.Future]], error: Exception) -> None:
    for _, done in batch:
        if not done.done():
            done.set_exception(error)
