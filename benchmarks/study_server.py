"""Load test of the study server on loopback: a realistic Prolific load, or saturation, with a SIGKILL.

    python benchmarks/study_server.py                      # human pace (default)
    python benchmarks/study_server.py --mode saturate      # no think time
    python benchmarks/study_server.py --monitor-every 5    # with the researcher's monitor page open
    source .ci/postgres.sh && start_postgres && \
        python benchmarks/study_server.py --database-url "$STUDY_TEST_DATABASE_URL"; stop_postgres  # PostgreSQL 15

Both export a synthetic study (random stimuli, ``--pairs`` model pairs x 20 + 100 natural + 42
repeats + 4 attention checks per participant), start ``serve_study.py`` on 127.0.0.1 with SQLite
and production settings (Prolific-format ids, admin token from the environment; only the session rate
limits are lifted, since every simulated participant comes from 127.0.0.1 and 1,000 arrive in 30 s), SIGKILL it
during the run and restart it on the same database, and finally check that every acknowledged answer
is stored exactly once with the ratings that were sent. Clients retry on connection errors and 5xx,
as the page does.

``human``: ``--participants`` (1,000) arrive over ``--ramp`` seconds and each answers one trial every
3-8 s (uniform) until ``--duration`` ends; an admin export of ``responses.csv`` (incomplete sessions
included) streams at mid-run and SIGKILL comes at ``--kill-at`` of the duration. Reports answer
latency p50/p95/p99 in steady state, while the export streams, and across the outage. ``--monitor-every 5``
keeps the researcher's monitor page open meanwhile (its figures fetched every 5 s, as the page does).

``saturate``: ``--participants`` (50) scripted participants take the whole study concurrently with no
think time; SIGKILL when ``--kill-at`` of all answers are acknowledged. Reports throughput.

Latency is measured by the client, on the same machine as the server: client and server share its
cores, so figures include the load generator's own scheduling delays (it prints its event-loop lag). In
``human`` mode each participant speaks HTTP/1.1 over one keep-alive connection of its own through the
small ``Browser`` client below, which costs far less CPU than 1,000 httpx clients did.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from sqlalchemy import create_engine, text

from controversial.records.manifest import ManifestRow, write_manifest
from controversial.records.names import stimulus_filename
from controversial.study.bundle import load_bundle
from controversial.study.export import ExportOptions, export_study
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import (
    instructions,
    prolific_like_id,
    scripted_ratings,
    served_checks,
    take_study,
)
from controversial.synthesis.stimuli import save_png

REPO = Path(__file__).resolve().parents[1]
MODELS = ("abs", "kde", "vgg", "capsnet", "madry")
ADMIN_TOKEN = secrets.token_urlsafe(32)


def synthetic_sweep(root: Path, n_pairs: int, rng: np.random.Generator) -> Path:
    """One run per model pair, all 90 ordered class pairs, random 28x28 stimuli and scores."""
    for model_a, model_b in list(itertools.combinations(MODELS, 2))[:n_pairs]:
        run, rows = root / f"{model_a}_vs_{model_b}", []
        for a, b in itertools.permutations(range(10), 2):
            name = stimulus_filename(model_a, str(a), model_b, str(b), 0)
            save_png(run / name, rng.random((1, 28, 28)))
            rows.append(
                ManifestRow(
                    "mnist",
                    model_a,
                    model_b,
                    a,
                    b,
                    str(a),
                    str(b),
                    0,
                    "synthetic",
                    "noise",
                    1,
                    True,
                    float(rng.uniform(0.75, 1)),
                    1.0,
                    0.9,
                    0.1,
                    0.1,
                    0.9,
                    True,
                    "accepted",
                    name,
                    0.0,
                )
            )
        write_manifest(run / "manifest.csv", rows)
    return root


def random_test_split(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    labels = np.tile(np.arange(10), 20)
    return np.random.default_rng(1).integers(0, 256, (len(labels), 1, 28, 28), dtype=np.uint8), labels


class Server:
    """``serve_study.py`` as a child process that can be killed and restarted on the same database."""

    def __init__(self, bundle: Path, database_url: str, port: int, logs: Path) -> None:
        self.database_url = database_url
        self.args = [
            sys.executable,
            "serve_study.py",
            f"study_dir={bundle}",
            "completion_code=BENCH",
            f"port={port}",
            f"database_url={database_url}",
            "rate_limit.sessions_per_minute=1000000",
            "rate_limit.burst=1000000",
            "rate_limit.new_participants_per_minute=1000000",
            "rate_limit.new_participants_burst=1000000",
        ]
        self.base, self.logs, self.process, self.starts = f"http://127.0.0.1:{port}", logs, None, 0
        self.cpu_s = 0.0  # CPU seconds used by the server processes that have ended
        self.startup_cpu_s = 0.0  # of which (and of the running one) spent before each became healthy

    def _cpu(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def start(self) -> float:
        self.starts += 1
        log = (self.logs / f"server{self.starts}.log").open("w")
        self.process = subprocess.Popen(
            self.args + [f"hydra.run.dir={self.logs / f'hydra{self.starts}'}"],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "STUDY_ADMIN_TOKEN": ADMIN_TOKEN},
        )
        deadline = time.monotonic() + 180  # imports alone take a minute on a starved CPU
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited; see {log.name}")
            try:
                if httpx.get(f"{self.base}/api/health", timeout=1).status_code == 200:
                    self.startup_cpu_s += self._cpu()
                    return time.monotonic()
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("server did not become healthy within 180 s")

    def kill(self) -> float:
        self.cpu_s += self._cpu()
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        return time.monotonic()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.cpu_s += self._cpu()
            self.process.terminate()
            self.process.wait(timeout=10)


def percentiles(values: list[float]) -> str:
    if not values:
        return f"{'n/a':>7} {'n/a':>7} {'n/a':>7}"
    p50, p95, p99 = np.percentile(np.array(values) * 1000, [50, 95, 99])
    return f"{p50:7.1f} {p95:7.1f} {p99:7.1f}"


def verify(database_url: str, sent: dict[str, dict[int, list[int]]]) -> tuple[int, int, int]:
    """(acknowledged answers, found exactly once with the sent ratings, rows in the table)."""
    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT p.prolific_pid, r.position, r.ratings_json FROM responses r JOIN participants p "
                "ON p.id = r.participant_id"
            )
        ).all()
    engine.dispose()
    found: dict[tuple[str, int], list[str]] = {}
    for pid, position, ratings in rows:
        found.setdefault((pid, position), []).append(ratings)
    acknowledged = exact = 0
    for pid, answers in sent.items():
        for position, ratings in answers.items():
            acknowledged += 1
            stored = found.get((pid, position), [])
            exact += len(stored) == 1 and stored[0].replace(" ", "") == str(ratings).replace(" ", "")
    return acknowledged, exact, len(rows)


def make_study(work: Path, pairs: int) -> Path:
    sweep = synthetic_sweep(work / "sweep", pairs, np.random.default_rng(0))
    return export_study(
        sweep,
        work / "studies",
        ExportOptions(name="bench", display={"size": 112}, pilot=True),
        random_test_split,
        REPO / "human_study" / "src",
    )


# ---- human pace ----------------------------------------------------------------------------------------------


@dataclass
class HumanRun:
    """What the simulated participants did: answer latencies (finished at, seconds), retries, answers."""

    samples: list[tuple[float, float]] = field(default_factory=list)
    retries: int = 0
    started: int = 0
    sent: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class Reply:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self):
        return json.loads(self.content)


class Browser:
    """A minimal HTTP/1.1 client over one keep-alive connection, as a browser tab keeps: JSON in, JSON out.

    Why not httpx here: 1,000 httpx clients in one process cost the generator 2.3-4.2 ms of CPU per
    answer on the two cores it shares with the server, more than the server itself, and their event
    loop ran late by up to hundreds of ms, which the latencies then included (docs/human_study.md, 7).
    """

    def __init__(self, host: str, port: int, timeout: float = 60) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body=None) -> Reply:
        try:
            return await asyncio.wait_for(self._exchange(method, path, body), self.timeout)
        except BaseException:
            self.close()  # a broken or half-read connection is never reused
            raise

    async def _exchange(self, method: str, path: str, body) -> Reply:
        if self.reader is not None and self.reader.at_eof():  # the server closed it while idle (keep-alive
            self.close()  # timeout): open a new one, as browsers and httpx do, instead of failing a request
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        payload = b"" if body is None else json.dumps(body).encode()
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Length: {len(payload)}\r\n"
        head += "Content-Type: application/json\r\n\r\n" if body is not None else "\r\n"
        self.writer.write(head.encode() + payload)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
        content = await self.reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return Reply(status, content)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def persistent(client: Browser, run: HumanRun, method: str, url: str, body=None) -> Reply:
    """One request, retried like the page does (network errors, 5xx) with capped backoff."""
    for attempt in itertools.count():
        try:
            reply = await client.request(method, url, body)
            if reply.status_code < 500:
                return reply
        except (OSError, EOFError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError, IndexError):
            pass
        run.retries += 1
        await asyncio.sleep(min(0.25 * 2**attempt, 4.0))
    raise AssertionError("unreachable")


async def human(
    base: str,
    run: HumanRun,
    index: int,
    start_at: float,
    stop_at: float,
    categories: list[str],
    checks: Callable[[list[str]], dict[str, str]],
) -> None:
    """Arrive at ``start_at``, then answer one trial every 3-8 s until ``stop_at``, over a connection of
    its own, as a browser does; ``checks`` names the attention checks among the ids served (from the database)."""
    rng = random.Random(index)
    pid = prolific_like_id(rng)
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    host, port = base.removeprefix("http://").split(":")
    browser = Browser(host, int(port))
    try:
        await _take_study(browser, run, pid, rng, stop_at, categories, checks)
    finally:
        browser.close()


async def _take_study(
    client: Browser,
    run: HumanRun,
    pid: str,
    rng: random.Random,
    stop_at: float,
    categories: list[str],
    checks: Callable[[list[str]], dict[str, str]],
) -> None:
    try:
        reply = await persistent(
            client,
            run,
            "POST",
            "/api/session",
            {"prolific_pid": pid, "study_id": "b" * 24, "session_id": prolific_like_id(rng)},
        )
        state = reply.json()
        token = state["token"]
        await persistent(client, run, "POST", f"/api/sessions/{token}/consent", {"consent": True, "browser": {}})
        run.started += 1
        answers = run.sent.setdefault(pid, {})
        instructed = checks([trial["stimulus_id"] for trial in state["trials"]])  # an attentive person
        for trial in state["trials"]:
            think = rng.uniform(3.0, 8.0)
            if time.monotonic() + think > stop_at:
                return
            await asyncio.sleep(think)
            ratings = scripted_ratings(trial["stimulus_id"], categories, (0, 25, 50, 75, 100), rng, instructed)
            body = {
                "position": trial["position"],
                "stimulus_id": trial["stimulus_id"],
                "ratings": ratings,
                "rt_ms": round(think * 1000, 1),
                "first_reaction_rt_ms": round(think * 300, 1),
            }
            began = time.monotonic()
            reply = await persistent(client, run, "POST", f"/api/sessions/{token}/responses", body)
            if reply.status_code not in (200, 201):
                raise RuntimeError(f"answer refused: {reply.status_code} {reply.text}")
            run.samples.append((time.monotonic(), time.monotonic() - began))
            answers[trial["position"]] = [ratings[c] for c in categories]
    except Exception as error:  # reported; the run goes on
        run.errors.append(f"{pid}: {error!r}")


async def admin_export(base: str, at: float) -> tuple[float, float, int]:
    """Stream responses.csv at ``at``, retried from the start if the server goes down meanwhile;
    returns (start, end, bytes) of the export that completed."""
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        for attempt in itertools.count():
            began, size = time.monotonic(), 0
            try:
                async with client.stream(
                    "GET",
                    "/admin/responses.csv?include_incomplete=true",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                ) as reply:
                    reply.raise_for_status()
                    async for chunk in reply.aiter_bytes():
                        size += len(chunk)
                return began, time.monotonic(), size
            except (httpx.TransportError, httpx.HTTPStatusError):
                await asyncio.sleep(min(0.25 * 2**attempt, 4.0))
    raise AssertionError("unreachable")


async def monitor(base: str, every: float, stop_at: float) -> tuple[list[float], int]:
    """The researcher's monitor page left open: ``/admin/monitor.json`` every ``every`` seconds, as its script
    asks; returns the latencies of the answered requests and the number that failed (the outage included)."""
    latencies, failed = [], 0
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        while time.monotonic() + every < stop_at:
            await asyncio.sleep(every)
            began = time.monotonic()
            try:
                reply = await client.get("/admin/monitor.json", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
                reply.raise_for_status()
                latencies.append(time.monotonic() - began)
            except (httpx.TransportError, httpx.HTTPStatusError):
                failed += 1
    return latencies, failed


async def loop_lag(stop_at: float, tick: float = 0.01) -> list[tuple[float, float]]:
    """(time, seconds late) of a 10 ms timer in the load generator's own event loop: how much of a measured
    latency can be the generator's delay in noticing a reply rather than the server's."""
    lags = []
    while time.monotonic() < stop_at:
        began = time.monotonic()
        await asyncio.sleep(tick)
        lags.append((time.monotonic(), time.monotonic() - began - tick))
    return lags


async def killer(server: Server, at: float) -> tuple[float, float]:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    killed = server.kill()
    up = await asyncio.to_thread(server.start)
    return killed, up


async def human_load(server: Server, bundle: Path, args: argparse.Namespace) -> tuple[HumanRun, dict]:
    loaded = load_bundle(bundle)
    categories = list(loaded.spec.categories)
    reader = create_engine(server.database_url)  # the researcher's side: which served ids are attention checks

    def checks(served: list[str]) -> dict[str, str]:
        return served_checks(reader, loaded, served)

    run = HumanRun()
    t0 = time.monotonic()
    stop_at = t0 + args.duration
    tasks = [
        human(server.base, run, i, t0 + args.ramp * i / args.participants, stop_at, categories, checks)
        for i in range(args.participants)
    ]
    lag = asyncio.create_task(loop_lag(stop_at))
    export = asyncio.create_task(admin_export(server.base, t0 + args.duration / 2))
    kill = asyncio.create_task(killer(server, t0 + args.kill_at * args.duration))
    watch = asyncio.create_task(monitor(server.base, args.monitor_every, stop_at)) if args.monitor_every else None
    await asyncio.gather(*tasks)
    lags = await lag
    export_began, export_ended, export_bytes = await export
    killed, up = await kill
    marks = {
        "t0": t0,
        "end": time.monotonic(),
        "export": (export_began, export_ended, export_bytes),
        "killed": killed,
        "up": up,
        "lags": [late for at, late in lags if at > t0 + args.ramp],
        "monitor": await watch if watch else None,
    }
    return run, marks


def report_human(args: argparse.Namespace, run: HumanRun, marks: dict, database_url: str, n_trials: int) -> bool:
    t0, (eb, ee, size), killed, up = marks["t0"], marks["export"], marks["killed"], marks["up"]
    ramp_end = t0 + args.ramp
    steady = [s for at, s in run.samples if at > ramp_end and not (eb <= at <= ee) and not (killed - 1 <= at <= up + 5)]
    during_export = [s for at, s in run.samples if eb <= at <= ee]
    outage = [s for at, s in run.samples if killed - 1 <= at <= up + 5]
    acknowledged, exact, rows = verify(database_url, run.sent)
    span = marks["end"] - t0
    print(
        f"study server, human pace: {args.participants} participants ({run.started} started) arriving over "
        f"{args.ramp:g} s, one answer every 3-8 s each, {args.duration:g} s run, {n_trials}-trial study; "
        f"{args.backend}; loopback; client and server share {os.cpu_count()} cores"
    )
    print(f"{'phase':<34}{'answers':>9}{'answers/s':>11}   p50 ms  p95 ms  p99 ms")
    print(f"{'steady state (after arrivals)':<34}{len(steady):>9}{'':>11}   {percentiles(steady)}")
    print(f"{'while the admin export streams':<34}{len(during_export):>9}{'':>11}   {percentiles(during_export)}")
    print(f"{'around SIGKILL + restart':<34}{len(outage):>9}{'':>11}   {percentiles(outage)}")
    print(
        f"{'whole run':<34}{len(run.samples):>9}{len(run.samples) / span:>11.1f}   "
        f"{percentiles([s for _, s in run.samples])}"
    )
    print(
        f"admin export: responses.csv, {size / 1e6:.1f} MB in {ee - eb:.2f} s at t={eb - t0:.0f} s; SIGKILL at "
        f"t={killed - t0:.0f} s, restart took {up - killed:.1f} s; {run.retries} failed attempts retried"
    )
    print(
        f"verification: {exact}/{acknowledged} acknowledged answers stored exactly once with the sent ratings; "
        f"{rows} rows in the table; {len(run.errors)} participant errors"
    )
    n = max(len(run.samples), 1)
    serving = marks["server_cpu_s"] - marks["server_startup_cpu_s"]
    print(
        f"server CPU: {marks['server_cpu_s']:.0f} s for {len(run.samples)} answers and {run.started} arrivals, "
        f"{1000 * marks['server_cpu_s'] / n:.1f} ms per answer with start-up, {1000 * serving / n:.1f} ms without; "
        f"load generator CPU: {1000 * marks['client_cpu_s'] / n:.1f} ms per answer; load average "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    print(f"load generator's event-loop lag (10 ms timer), p50/p95/p99 ms: {percentiles(marks['lags'])}")
    if marks["monitor"] is not None:
        latencies, failed = marks["monitor"]
        print(
            f"monitor page open, /admin/monitor.json every {args.monitor_every:g} s: {len(latencies)} answered "
            f"({failed} failed, around the SIGKILL), p50/p95/p99 ms: {percentiles(latencies)}"
        )
    for error in run.errors[:5]:
        print("  error:", error)
    ok = exact == acknowledged == rows and not run.errors and run.started == args.participants
    p99 = np.percentile(np.array(steady) * 1000, 99) if steady else float("nan")
    print(f"steady-state p99 {p99:.1f} ms: {'within' if p99 < 100 else 'ABOVE'} the 100 ms target")
    return ok


# ---- saturation ----------------------------------------------------------------------------------------------


class Recorder:
    """Latencies of acknowledged answer submissions, failed attempts, and the running count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.samples: list[tuple[float, float]] = []  # (finished at, seconds)
        self.failed_attempts = 0
        self.acknowledged = 0

    def call(self, client: httpx.Client):
        def request(method: str, url: str, body):
            for attempt in itertools.count():
                started = time.monotonic()
                try:
                    reply = client.request(method, url, json=body)
                except httpx.TransportError:
                    reply = None
                if reply is not None and reply.status_code < 500:
                    if url.endswith("/responses") and reply.status_code in (200, 201):
                        with self.lock:
                            self.samples.append((time.monotonic(), time.monotonic() - started))
                            self.acknowledged += 1
                    return reply
                with self.lock:
                    self.failed_attempts += 1
                time.sleep(min(0.05 * 2**attempt, 0.5))

        return request


def saturate(server: Server, bundle: Path, args: argparse.Namespace, database_url: str, n_trials: int) -> bool:
    total = args.participants * n_trials
    recorder, results, errors = Recorder(), {}, []
    instructed, resolve = instructions(load_bundle(bundle)), resolver(create_engine(database_url))

    def participant(index: int) -> None:
        rng = random.Random(index)
        pid = prolific_like_id(rng)
        try:
            with httpx.Client(base_url=server.base, timeout=30) as client:
                call = recorder.call(client)
                results[pid] = take_study(client, pid, rng, call, instructed=instructed, resolve=resolve)
        except Exception as error:  # reported in the table; the run must still stop by itself
            errors.append(f"{pid}: {error}")

    threads = [threading.Thread(target=participant, args=(i,), daemon=True) for i in range(args.participants)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    while recorder.acknowledged < args.kill_at * total and any(t.is_alive() for t in threads):
        if time.monotonic() - started > args.timeout:
            break
        time.sleep(0.01)
    acknowledged_at_kill = recorder.acknowledged
    killed_at = server.kill()
    up_at = server.start()
    deadline = started + args.timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    finished = time.monotonic()

    before = [s for at, s in recorder.samples if at <= killed_at]
    after = [s for at, s in recorder.samples if at > up_at]
    acknowledged, exact, rows = verify(database_url, {pid: r.answers for pid, r in results.items()})
    completed = sum(r.redirect_url.endswith("cc=BENCH") for r in results.values())
    print(
        f"study server load test: {args.participants} participants x {n_trials} trials, {args.backend}, "
        f"loopback, no think time; client threads and server share {os.cpu_count()} cores"
    )
    print(f"{'phase':<24}{'answers':>9}{'seconds':>9}{'answers/s':>11}   p50 ms  p95 ms  p99 ms")
    print(
        f"{'before SIGKILL':<24}{len(before):>9}{killed_at - started:>9.1f}"
        f"{len(before) / (killed_at - started):>11.1f}   {percentiles(before)}"
    )
    print(
        f"{'after restart':<24}{len(after):>9}{finished - up_at:>9.1f}"
        f"{len(after) / max(finished - up_at, 1e-9):>11.1f}   {percentiles(after)}"
    )
    print(
        f"{'whole run (incl. outage)':<24}{len(recorder.samples):>9}{finished - started:>9.1f}"
        f"{len(recorder.samples) / (finished - started):>11.1f}   {percentiles([s for _, s in recorder.samples])}"
    )
    print(
        f"SIGKILL after {acknowledged_at_kill} acknowledged answers; restart took {up_at - killed_at:.1f} s; "
        f"{recorder.failed_attempts} failed attempts retried"
    )
    print(
        f"verification: {exact}/{acknowledged} acknowledged answers stored exactly once with the sent ratings; "
        f"{rows} rows for {total} trials; {completed}/{args.participants} participants completed; "
        f"{len(errors)} participant errors"
    )
    for error in errors[:5]:
        print("  error:", error)
    return exact == acknowledged == total == rows and completed == args.participants and not errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("human", "saturate"), default="human")
    parser.add_argument("--participants", type=int, default=None, help="default: 1000 (human), 50 (saturate)")
    parser.add_argument("--pairs", type=int, default=2, help="model pairs x 20 stimuli (at most 10)")
    parser.add_argument("--duration", type=float, default=150, help="human: seconds of load")
    parser.add_argument("--ramp", type=float, default=30, help="human: participants arrive over this many seconds")
    parser.add_argument(
        "--kill-at",
        type=float,
        default=None,
        help="SIGKILL at this fraction of the duration (human, default 0.75) or of all answers (saturate, default 0.4)",
    )
    parser.add_argument(
        "--monitor-every", type=float, default=0, help="human: poll the monitor page's figures this often (s); 0: off"
    )
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument(
        "--database-url",
        default=None,
        help="an EMPTY database to use instead of a fresh SQLite file (e.g. postgresql+psycopg://...)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="saturate: give up after this many seconds")
    args = parser.parse_args()
    human_mode = args.mode == "human"
    args.participants = args.participants or (1000 if human_mode else 50)
    args.kill_at = args.kill_at if args.kill_at is not None else (0.75 if human_mode else 0.4)

    work = Path(tempfile.mkdtemp(prefix="study-bench-"))
    bundle = make_study(work, args.pairs)
    database_url = args.database_url or f"sqlite:///{work / 'bench.db'}"
    args.backend = "SQLite (WAL, synchronous=FULL)" if database_url.startswith("sqlite") else database_url.split(":")[0]
    n_trials = sum(t.kind != "demo" for t in load_bundle(bundle).trials)
    server = Server(bundle, database_url, args.port, work)
    server.start()
    gc.freeze()  # the generator's own long-lived objects out of the collector's reach (fewer pauses in its loop)
    try:
        if human_mode:
            client_cpu = time.process_time()
            run, marks = asyncio.run(human_load(server, bundle, args))
            marks["client_cpu_s"] = time.process_time() - client_cpu
            server.stop()
            marks["server_cpu_s"], marks["server_startup_cpu_s"] = server.cpu_s, server.startup_cpu_s
            ok = report_human(args, run, marks, database_url, n_trials)
        else:
            ok = saturate(server, bundle, args, database_url, n_trials)
    finally:
        server.stop()
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
