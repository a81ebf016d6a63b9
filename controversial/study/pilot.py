"""A scripted pilot: the study served on loopback and taken over HTTP by simulated participants.

The dry run a lab does before paying anyone (jsPsych's simulation mode serves the same purpose): the real server
and database, participants who arrive, consent, answer every trial (attention checks as asked) and complete, and
whose ratings come from a chosen model's probabilities plus per-participant noise (``analysis.simulate``), so the
export and the analysis afterwards should rank that model first.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import uvicorn

from controversial.analysis.simulate import ParticipantNoise, simulate_participants
from controversial.study.bundle import StudyBundle
from controversial.study.db import make_engine
from controversial.study.http_protocol import uvicorn_config
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, prolific_like_id, take_study
from controversial.study.server import ServeStudySettings, create_app


@dataclass(frozen=True)
class PilotRun:
    """What the scripted participants did."""

    url: str
    participants: int
    answers: int
    seconds: float


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def loopback_server(settings: ServeStudySettings) -> Iterator[str]:
    """The study server on 127.0.0.1 (a free port) in a background thread, for the ``with`` block; yields its URL."""
    server = uvicorn.Server(uvicorn_config(create_app(settings), "127.0.0.1", _free_port(), access_log=False))
    thread = threading.Thread(target=server.run, name="pilot-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the pilot's study server did not start on 127.0.0.1")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """A line per request (httpx) and per server start/stop (uvicorn) would bury the pilot's own report."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def model_raters(
    bundle: StudyBundle,
    images: Sequence[str],
    probabilities: np.ndarray,
    participants: int,
    noise: ParticipantNoise,
    seed: int,
) -> list[Callable[[str], dict[str, int]]]:
    """One ``rate(stimulus_id)`` per participant: the rater model's (N, K) probabilities on the bundle's rated
    ``images`` through that participant's noise, quantised to the study's rating levels. Practice images, which
    no model saw, get random levels."""
    levels = bundle.spec.rating_levels
    ratings = simulate_participants(probabilities, participants, noise, [v / 100 for v in levels], seed=seed)
    index = {image: n for n, image in enumerate(images)}
    categories = bundle.spec.categories
    rng = random.Random(seed)

    def rater(p: int) -> Callable[[str], dict[str, int]]:
        def rate(stimulus_id: str) -> dict[str, int]:
            n = index.get(bundle.key[stimulus_id].image)
            if n is None:
                return {c: rng.choice(levels) for c in categories}
            return {c: int(round(100 * ratings[p, n, k])) for k, c in enumerate(categories)}

        return rate

    return [rater(p) for p in range(participants)]


def run_pilot(
    bundle: StudyBundle, database_url: str, raters: Sequence[Callable[[str], dict[str, int]]], seed: int
) -> PilotRun:
    """Serve ``bundle`` on loopback into ``database_url`` and let one scripted participant per rater take it."""
    settings = ServeStudySettings(
        study_dir=str(bundle.root),
        completion_code="PILOT",
        database_url=database_url,
        rate_limit={  # every scripted participant arrives from 127.0.0.1, all at once
            "sessions_per_minute": 1e6,
            "burst": len(raters) + 1,
            "new_participants_per_minute": 1e6,
            "new_participants_burst": len(raters) + 1,
        },
    )
    rng = random.Random(seed)
    attentive = instructions(bundle)
    start = time.perf_counter()
    answers = 0
    reader = make_engine(database_url)  # the researcher's side: which stimulus each served id shows
    try:
        with _quiet("httpx", "uvicorn.error"), loopback_server(settings) as url, httpx.Client(base_url=url) as client:
            for rate in raters:
                pid = prolific_like_id(rng)
                result = take_study(client, pid, rng, instructed=attentive, rate=rate, resolve=resolver(reader))
                answers += len(result.answers)
    finally:
        reader.dispose()
    return PilotRun(url, len(raters), answers, time.perf_counter() - start)


def database_file(out_dir: Path) -> str:
    """The pilot's own SQLite database, in its run dir: a pilot never writes into the bundle's real one."""
    return f"sqlite:///{(out_dir / 'pilot.db').resolve()}"
