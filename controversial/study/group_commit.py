"""Group commit: answers are written by one thread, many per transaction, and acknowledged after its commit.

Why: with ``synchronous=FULL`` every SQLite commit waits for an fsync (about 4 ms on the reference
machine), and SQLite has one writer at a time, so one commit per answer caps a study at a few hundred
answers a second even with no Python at all, and it held the server's one connection through each
request's Python work (docs/human_study.md, section 7). Here the writer takes every job waiting in its
queue, runs them one after another in one transaction, commits once (one fsync for the batch) and only
then resolves each job's future: an acknowledged answer is exactly as durable as with one commit each.

A job reports a client error by raising one of ``client_errors`` before it writes anything; that
fails its own request only. Any other exception, or a failed commit, rolls the whole batch back and
fails every job in it (the pages retry a 5xx): nothing of that batch was acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)
T = TypeVar("T")
Job = Callable[[Connection], Any]
_STOP = None


class GroupCommitWriter:
    """One writer thread over ``engine``; ``await writer.run(job)`` returns ``job(connection)`` once committed."""

    def __init__(
        self, engine: Engine, client_errors: tuple[type[Exception], ...] = (), max_batch: int = 256
    ) -> None:
        self._engine, self._client_errors, self._max_batch = engine, client_errors, max_batch
        self._jobs: queue.SimpleQueue[tuple[Job, Future] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def run(self, job: Callable[[Connection], T]) -> T:
        """Queue ``job`` for the next batch; its result (or error) once the batch has committed."""
        if self._thread is None:
            self._start()
        done: Future = Future()
        self._jobs.put((job, done))
        return await asyncio.wrap_future(done)

    def close(self) -> None:
        """Finish the queued jobs, then stop the thread (the next ``run`` starts a new one)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(_STOP)
                self._thread.join()
                self._thread = None

    def _start(self) -> None:  # on first use, so an app that never serves an answer has no thread
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="group-commit", daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            first = self._jobs.get()
            if first is _STOP:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    self._jobs.put(_STOP)  # after this batch
                    break
                batch.append(item)
            self._run_batch(batch)

    def _run_batch(self, batch: list[tuple[Job, Future]]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            with self._engine.connect() as connection, connection.begin():
                for job, _ in batch:
                    try:
                        outcomes.append((True, job(connection)))
                    except self._client_errors as error:  # refused before writing: only this request fails
                        outcomes.append((False, error))
        except Exception as error:  # rolled back: nothing in this batch was acknowledged
            log.exception("a batch of %d answers was rolled back", len(batch))
            for _, done in batch:
                done.set_exception(error)
            return
        for (succeeded, value), (_, done) in zip(outcomes, batch):
            if succeeded:
                done.set_result(value)
            else:
                done.set_exception(value)
