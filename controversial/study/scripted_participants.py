"""Scripted participants that take a study through the real HTTP API (tests, load benchmark, dry runs).

They behave like a browser running ``human_study/``: arrive with Prolific parameters, consent, answer
their stored trials in order, then complete. Attention checks are images drawn for each participant under
ids of their own, so a script cannot read what they ask: pass ``instructed`` (stimulus id -> category, from
the bundle's private key) and ``resolve`` (served ids -> stimulus ids, from the database) to play an attentive
person; without them the script answers them like any image, as a bot would. ``call``
lets a caller add retries or timing around every request without re-implementing the protocol.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import httpx
from sqlalchemy import Engine

from controversial.study.bundle import StudyBundle
from controversial.study.presentations import stimuli_shown

Call = Callable[[str, str, Any], httpx.Response]
Resolve = Callable[[Sequence[str]], Mapping[str, str]]  # served ids -> the bundle's stimulus ids


@dataclass(frozen=True)
class TakeResult:
    """What a scripted participant sent (position -> ratings in category order) and where it ended."""

    token: str | None
    answers: dict[int, list[int]]
    redirect_url: str


def prolific_like_id(rng: random.Random) -> str:
    """A random id in Prolific's format (24 lower-case hex digits)."""
    return f"{rng.getrandbits(96):024x}"


def instructions(bundle: StudyBundle) -> dict[str, str]:
    """Attention check id -> the category it asks for (what an attentive person reads off the image)."""
    return {e.stimulus_id: e.instructed_class for e in bundle.key.values() if e.kind == "attention"}


def served_checks(engine: Engine, bundle: StudyBundle, served_ids: Sequence[str]) -> dict[str, str]:
    """Served id -> the category its attention check asks for, among ``served_ids``: ``instructions`` under the
    ids a participant was served, read from the database (the researcher's view, never the browser's)."""
    checks = instructions(bundle)
    return {served: checks[sid] for served, sid in stimuli_shown(engine, served_ids).items() if sid in checks}


def scripted_ratings(
    stimulus_id: str,
    categories: Sequence[str],
    levels: Sequence[int],
    rng: random.Random,
    instructed: Mapping[str, str],
) -> dict[str, int]:
    """Random ratings, except that an attention check in ``instructed`` is answered as it asks."""
    if stimulus_id in instructed:
        return {c: (100 if c == instructed[stimulus_id] else 0) for c in categories}
    return {c: rng.choice(list(levels)) for c in categories}


def _checked(reply: httpx.Response, *ok: int) -> dict:
    if reply.status_code not in ok:
        raise RuntimeError(f"{reply.request.method} {reply.request.url.path} -> {reply.status_code}: {reply.text}")
    return reply.json()


def take_study(
    client: httpx.Client,
    prolific_pid: str,
    rng: random.Random,
    call: Call | None = None,
    instructed: Mapping[str, str] | None = None,
    session_id: str | None = None,
    rate: Callable[[str], dict[str, int]] | None = None,
    resolve: Resolve | None = None,
) -> TakeResult:
    """Run one participant from arrival to completion; a PID seen before resumes under the same SESSION_ID.

    ``rate(stimulus_id)`` gives a stimulus trial's ratings (e.g. a simulated person's); default random.
    ``instructed`` and ``rate`` take the bundle's stimulus ids, which the server never sends: ``resolve`` maps
    the ids it served to them (``presentations.resolver``, the researcher's view of the database).
    """
    if (instructed or rate) and resolve is None:
        raise ValueError("instructed= and rate= need resolve= (served ids -> the bundle's stimulus ids)")
    request: Call = call or (lambda method, url, body: client.request(method, url, json=body))
    study = _checked(request("GET", "/api/study", None), 200)
    arrival = {
        "prolific_pid": prolific_pid,
        "study_id": prolific_pid[::-1],
        "session_id": session_id or prolific_pid[1:] + prolific_pid[:1],
    }
    state = _checked(request("POST", "/api/session", arrival), 200)
    if state["status"] == "completed":
        return TakeResult(None, {}, state["redirect_url"])
    token = state["token"]
    if not state["consented"]:
        _checked(
            request("POST", f"/api/sessions/{token}/consent", {"consent": True, "browser": {"scripted": True}}), 200
        )
    answers: dict[int, list[int]] = {}
    shown = resolve([trial["stimulus_id"] for trial in state["trials"]]) if resolve else {}
    for trial in state["trials"]:
        stimulus_id = shown.get(trial["stimulus_id"], trial["stimulus_id"])
        if rate is not None and stimulus_id not in (instructed or {}):
            ratings = rate(stimulus_id)
        else:
            ratings = scripted_ratings(stimulus_id, study["categories"], study["rating_levels"], rng, instructed or {})
        rt = rng.uniform(1600, 6000)
        body = {
            "position": trial["position"],
            "stimulus_id": trial["stimulus_id"],
            "ratings": ratings,
            "rt_ms": round(rt, 1),
            "first_reaction_rt_ms": round(rng.uniform(200, rt), 1),
        }
        _checked(request("POST", f"/api/sessions/{token}/responses", body), 200, 201)
        answers[trial["position"]] = [ratings[c] for c in study["categories"]]
    done = _checked(request("POST", f"/api/sessions/{token}/complete", None), 200)
    return TakeResult(token, answers, done["redirect_url"])
