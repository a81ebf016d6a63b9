"""The collection database: participants (with their stored trial order), the id each place in an order is
served under (``presentations``), and one row per answered trial.

SQLite by default (one file, zero setup) and PostgreSQL through a database URL. Uniqueness is
enforced by the database itself, (study, prolific_pid, prolific_session_id) and (participant, position),
so duplicate submissions and concurrent first visits cannot create duplicates whatever the server does.
A PROLIFIC_PID alone binds nothing (anyone can type one); the submission's SESSION_ID does, so a PID
that someone else claimed first is still open to its owner (``docs/human_study.md``, threat model). SQLite
runs in WAL mode with ``synchronous=FULL`` and ``BEGIN IMMEDIATE`` transactions: an acknowledged
response survives a SIGKILL (and power loss), and concurrent writers queue instead of failing.
Exports read through a second engine (``make_read_engine``): in WAL mode a reader sees one snapshot
and never holds the write lock, so a long admin export does not stall participants.

Session secrets are stored as SHA-256 digests only: a copy of the database does not let anyone act
as a participant.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    inspect,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def token_digest(token: str) -> str:
    """What the database keeps of a session secret (hex SHA-256)."""
    return hashlib.sha256(token.encode()).hexdigest()


class Base(DeclarativeBase):
    pass


class Participant(Base):
    """One Prolific participant in one study version, with the order they see trials in."""

    __tablename__ = "participants"
    __table_args__ = (
        UniqueConstraint("study", "prolific_pid", "prolific_session_id", name="uq_participant_study_pid_session"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study: Mapped[str] = mapped_column(String(128), index=True)
    prolific_pid: Mapped[str] = mapped_column(String(64))
    prolific_study_id: Mapped[str] = mapped_column(String(64), default="")
    prolific_session_id: Mapped[str] = mapped_column(String(64), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)  # token_digest(browser secret)
    order_json: Mapped[str] = mapped_column(Text)  # [[stimulus_id, kind, image_repetition], ...]
    n_trials: Mapped[int] = mapped_column(Integer)
    browser_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    consented_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_activity_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # epoch s of consent / last answer
    n_browser_changes: Mapped[int] = mapped_column(Integer, default=0)  # resumed from another browser
    n_refused: Mapped[int] = mapped_column(Integer, default=0)  # answers refused as conflicting with stored ones
    n_answered: Mapped[int] = mapped_column(Integer, default=0)  # stored responses, kept with each insert
    # Stimuli at a visual angle (display.degrees): the virtual chinrest's measurements, and why the participant
    # was screened out (``calibration.SCREENED_OUT``), if they were; null when the study is sized in pixels.
    px_per_degree: Mapped[float | None] = mapped_column(Float, nullable=True)
    viewing_distance_mm: Mapped[float | None] = mapped_column(Float, nullable=True)
    screened_out: Mapped[str | None] = mapped_column(String(32), nullable=True)


class Response(Base):
    """One answered trial: ten ratings in category order, committed before the server replies."""

    __tablename__ = "responses"
    __table_args__ = (UniqueConstraint("participant_id", "position", name="uq_response_participant_position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # 1-based place in the participant's order
    stimulus_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    image_repetition: Mapped[int] = mapped_column(Integer)
    ratings_json: Mapped[str] = mapped_column(Text)  # e.g. [0, 25, 100, ...] in the study's category order
    rt_ms: Mapped[float] = mapped_column(Float)
    first_reaction_rt_ms: Mapped[float] = mapped_column(Float)
    interval_ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # server clock, since the last answer
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Presentation(Base):
    """One place in a participant's order, under an id of its own: the browser sees this id and its image URL,
    never the bundle's stimulus id, so no id repeats across participants or between a stimulus and its repeat."""

    __tablename__ = "presentations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # random; the image URL's name
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    stimulus_id: Mapped[str] = mapped_column(String(64))  # the bundle's
    seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # an attention check's rendering; secret


def default_database_url(bundle_root: Path) -> str:
    """``sqlite:///<bundle>/responses.db``: the data lives next to the study version it belongs to."""
    return f"sqlite:///{(bundle_root / 'responses.db').resolve()}"


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # let the "begin" hook below issue BEGIN itself
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=15000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def is_in_memory(url: str) -> bool:
    """A SQLite database that lives in one process's memory (``sqlite://``, ``sqlite:///:memory:``)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the schema created; SQLite gets the durability settings above."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and not is_in_memory(url):  # a named file (``database`` is empty only in memory)
            path = Path(database)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Owner-only (Prolific ids, session digests); SQLite gives its -wal and -shm files the same mode.
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        # Every transaction takes SQLite's write lock, so one pooled connection loses no concurrency, and
        # threads queue on the pool (woken at once) instead of in SQLite's sleeping busy handler.
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 15}, pool_size=1, max_overflow=0, pool_timeout=60
        )
        _configure_sqlite(engine)
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    _check_schema(engine)
    Base.metadata.create_all(engine)
    return engine


def _check_schema(engine: Engine) -> None:
    """Refuse a database written by an older version (``create_all`` adds tables, never columns or keys, and a
    table added later would be missing the rows of the participants already stored)."""
    inspector = inspect(engine)
    present_tables = [table.name for table in Base.metadata.sorted_tables if inspector.has_table(table.name)]
    absent = [table.name for table in Base.metadata.sorted_tables if table.name not in present_tables]
    if present_tables and absent:
        raise RuntimeError(
            f"database lacks table(s) {', '.join(absent)}: it was written by an older version; export its data "
            "(mode=export, with the version that wrote it) and use a new database"
        )
    for table in Base.metadata.sorted_tables:
        if not inspector.has_table(table.name):
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        missing = [column.name for column in table.columns if column.name not in present]
        keys = {key["name"] for key in inspector.get_unique_constraints(table.name)}
        missing += [
            f"key {c.name}" for c in table.constraints if isinstance(c, UniqueConstraint) and c.name not in keys
        ]
        if missing:
            raise RuntimeError(
                f"database table {table.name!r} lacks {', '.join(missing)}: it was written "
                "by an older version; export its data (mode=export) and use a new database"
            )


def make_read_engine(url: str, engine: Engine) -> Engine:
    """The engine exports read through: for SQLite a separate read-only pool with deferred (snapshot)
    transactions, so a reader never waits for or blocks the writers; other databases have MVCC and
    share ``engine``."""
    if make_url(url).get_backend_name() != "sqlite":
        return engine
    reader = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 15}, pool_size=2, max_overflow=2, pool_timeout=60
    )

    @event.listens_for(reader, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only=ON")
        cursor.execute("PRAGMA busy_timeout=15000")
        cursor.close()

    @event.listens_for(reader, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN")  # deferred: a WAL snapshot, no write lock

    return reader


def session_factory(engine: Engine) -> sessionmaker:
    """Sessions that keep loaded rows usable after commit (replies are built from them)."""
    return sessionmaker(bind=engine, expire_on_commit=False)
