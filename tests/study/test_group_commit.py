"""Group commit: jobs queued together share one transaction, results come only after its commit, a client
error fails only its own job, and any other error rolls the whole batch back."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Connection, create_engine, event, text

from controversial.study.group_commit import GroupCommitWriter


class Refused(Exception):
    pass


@pytest.fixture
def engine(request, tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'gc.db'}", pool_size=1, max_overflow=0)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    yield engine
    engine.dispose()


def insert(k: int, log: list[str]):
    def job(connection: Connection) -> int:
        connection.execute(text("INSERT INTO t (k) VALUES (:k)"), {"k": k})
        log.append(f"job {k}")
        return k

    return job


def rows(engine) -> list[int]:
    with engine.connect() as connection:
        return [k for (k,) in connection.execute(text("SELECT k FROM t ORDER BY k"))]


async def gather(writer: GroupCommitWriter, jobs, log: list[str]):
    async def one(job):
        try:
            result = await writer.run(job)
        except Exception as error:  # noqa: BLE001  (the test inspects it)
            result = error
        log.append(f"result {result!r}")
        return result

    return await asyncio.gather(*(one(job) for job in jobs))


def test_jobs_queued_together_commit_once_and_are_answered_after_the_commit(engine):
    log: list[str] = []
    event.listen(engine, "commit", lambda _: log.append("commit"))
    results = asyncio.run(gather(GroupCommitWriter(engine), [insert(k, log) for k in range(5)], log))
    assert results == list(range(5))
    assert rows(engine) == list(range(5))
    assert log.count("commit") == 1  # all five were queued before the first batch began
    assert log.index("commit") > max(i for i, line in enumerate(log) if line.startswith("job"))
    assert log.index("commit") < min(i for i, line in enumerate(log) if line.startswith("result"))


def test_a_client_error_fails_only_its_own_job(engine):
    def refuse(_: Connection) -> None:
        raise Refused("no")

    log: list[str] = []
    results = asyncio.run(gather(GroupCommitWriter(engine, (Refused,)), [insert(1, log), refuse, insert(2, log)], log))
    assert results[0] == 1 and isinstance(results[1], Refused) and results[2] == 2
    assert rows(engine) == [1, 2]


def test_any_other_error_rolls_the_whole_batch_back(engine):
    log: list[str] = []
    jobs = [insert(1, log), insert(1, log), insert(3, log)]  # the second violates the primary key
    results = asyncio.run(gather(GroupCommitWriter(engine, (Refused,)), jobs, log))
    assert all(isinstance(r, Exception) for r in results)  # none was acknowledged ...
    assert rows(engine) == []  # ... and none was stored
    assert asyncio.run(GroupCommitWriter(engine).run(insert(4, log))) == 4  # the writer goes on
    assert rows(engine) == [4]


def test_a_failed_commit_acknowledges_nothing(engine):
    event.listen(engine, "connect", lambda dbapi, _: dbapi.execute("PRAGMA foreign_keys=ON"))
    engine.dispose()
    with engine.begin() as connection:  # a deferred key is checked at COMMIT, so the COMMIT itself fails
        connection.exec_driver_sql("CREATE TABLE u (k INTEGER REFERENCES t (k) DEFERRABLE INITIALLY DEFERRED)")

    def dangling(connection: Connection) -> None:
        connection.execute(text("INSERT INTO u (k) VALUES (99)"))

    log: list[str] = []
    results = asyncio.run(gather(GroupCommitWriter(engine), [insert(1, log), dangling, insert(2, log)], log))
    assert all(isinstance(r, Exception) for r in results)
    assert rows(engine) == []
    assert asyncio.run(GroupCommitWriter(engine).run(insert(4, log))) == 4  # the connection was rolled back
    assert rows(engine) == [4]


def test_later_jobs_form_the_next_batch(engine):
    log: list[str] = []
    event.listen(engine, "commit", lambda _: log.append("commit"))
    writer = GroupCommitWriter(engine)

    async def main():
        first = asyncio.ensure_future(writer.run(insert(1, log)))
        while "job 1" not in log:  # the first batch is under way
            await asyncio.sleep(0.001)
        second = await writer.run(insert(2, log))
        return await first, second

    assert asyncio.run(main()) == (1, 2)
    assert rows(engine) == [1, 2] and log.count("commit") == 2
