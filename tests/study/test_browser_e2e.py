"""End to end: headless Chromium (Debian's, via Playwright) takes a short study against a live server.

Consent, instructions, a practice trial, part of the study (with one answer lost by the network and
re-sent by the page), a reload that must resume where the participant was, the rest (including an
attention check, which is an image: the test reads its instruction from the bundle's key, as a
person reads it off the screen), the redirect to Prolific, which must come only after the server has
stored everything, and a return visit that is told the study is done. Then the database and the
admin CSV are checked. The server runs with production settings (Prolific-format ids, its
Content-Security-Policy, which must not block any script).

A second test opens the same submission in a second browser: the first page's next answer is
refused, and it must stop and say so instead of redirecting to Prolific.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from pathlib import Path

import httpx
import pytest
from helpers import study_server

from controversial.records.responses import read_human_ratings
from controversial.study.bundle import load_bundle
from controversial.study.scripted_participants import instructions

from .conftest import one_pair_pilot

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CODE = "E2ECODE"
ADMIN = "e2e-admin-token-0123456789abcdefghijklmnop"
PID, STUDY, SESSION = "5f0c1e2d3b4a596877665544", "60aa11bb22cc33dd44ee55ff", "6123456789abcdef01234567"
LEVELS = [0, 25, 50, 75, 100]
DIGITS = [str(d) for d in range(10)]


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def live_server(tmp_path, chromium, web_assets):
    bundle = one_pair_pilot(tmp_path, "e2e", size=112)
    database = tmp_path / "e2e.db"
    with study_server(bundle, tmp_path, database, CODE, ADMIN) as base:
        yield base, database, instructions(load_bundle(bundle))


def _stored(database: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT position, ratings_json FROM responses ORDER BY position").fetchall()


def _track_trials(page, database: Path) -> dict[int, str]:
    """Position -> the bundle's stimulus id, from the server's replies to the page's POST api/session (which name
    each place by an id of its own) and the database's record of what each id shows."""
    trials: dict[int, str] = {}

    def seen(response) -> None:
        if response.url.endswith("/api/session") and response.ok:
            with sqlite3.connect(database) as connection:
                shown = dict(connection.execute("SELECT id, stimulus_id FROM presentations").fetchall())
            trials.update({t["position"]: shown[t["stimulus_id"]] for t in response.json().get("trials", [])})

    page.on("response", seen)
    return trials


def _csp_errors(page) -> list[str]:
    """Console reports of Content-Security-Policy violations (there must be none, inline styles included)."""
    errors: list[str] = []
    page.on(
        "console",
        lambda message: errors.append(message.text) if "Content Security Policy" in message.text else None,
    )
    return errors


def _answer_current(page, expected: dict[int, list[int]], trials: dict[int, str], instructed: dict[str, str]) -> None:
    """Rate the trial on screen through real clicks; remember what was clicked, by position."""
    header = page.locator(".rating-header").inner_text()
    position = int(header.split()[1])
    if trials[position] in instructed:  # an attention check: do what the image says
        values = [100 if d == instructed[trials[position]] else 0 for d in DIGITS]
    else:
        values = [LEVELS[(position + i) % 5] for i in range(10)]
    continue_button = page.locator("button.rating-continue")
    for row, value in enumerate(values):
        assert continue_button.is_disabled()
        page.check(f'input[name="rating-{row}"][value="{value}"]')
    continue_button.click()
    expected[position] = values


def test_participant_takes_the_study_in_chromium(live_server):
    from playwright.sync_api import sync_playwright

    base, database, instructed = live_server
    errors: list[str] = []
    expected: dict[int, list[int]] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        trials, blocked = _track_trials(page, database), _csp_errors(page)
        page.route(
            "https://app.prolific.co/**", lambda route: route.fulfill(body="<p>Prolific</p>", content_type="text/html")
        )
        dropped: list[str] = []

        def drop_first_answer(route):  # the network loses the first answer once; the page must re-send it
            if not dropped:
                dropped.append(route.request.url)
                route.abort("failed")
            else:
                route.continue_()

        page.route("**/responses", drop_first_answer)
        url = f"{base}/?PROLIFIC_PID={PID}&STUDY_ID={STUDY}&SESSION_ID={SESSION}"
        page.goto(url)

        page.get_by_role("button", name="I agree").click()
        page.get_by_role("button", name="Start practice").click()
        assert page.locator(".rating-header").inner_text() == "Practice image 1 of 1"
        for row in range(10):
            page.check(f'input[name="rating-{row}"][value="50"]')
        page.locator("button.rating-continue").click()
        page.get_by_role("button", name="Start the study").click()

        for k in range(1, 7):
            page.wait_for_selector(f".rating-header:text-is('Image {k} of 23')")
            _answer_current(page, expected, trials, instructed)
        _wait(lambda: len(_stored(database)) == 6, 10, "six stored answers")
        assert [p for p, _ in _stored(database)] == [1, 2, 3, 4, 5, 6]  # no demo answer was stored

        page.reload()
        page.get_by_text("You have already rated 6 of 23 images").wait_for()
        page.get_by_role("button", name="Continue").click()
        for k in range(7, 24):
            page.wait_for_selector(f".rating-header:text-is('Image {k} of 23')")
            _answer_current(page, expected, trials, instructed)
        page.wait_for_url(f"https://app.prolific.co/submissions/complete?cc={CODE}", timeout=15000)
        assert len(dropped) == 1

        page.goto(url)  # coming back after completing
        page.get_by_text("You have already completed this study").wait_for()
        browser.close()
    assert errors == [] and blocked == [], blocked[:3]
    assert any(sid in instructed for sid in trials.values())  # the attention check was answered as asked

    rows = _stored(database)
    assert [p for p, _ in rows] == list(range(1, 24))
    assert {p: json.loads(r) for p, r in rows} == expected
    with sqlite3.connect(database) as connection:
        ((pid, study_id, session_id, completed, browser_json),) = connection.execute(
            "SELECT prolific_pid, prolific_study_id, prolific_session_id, completed_at, browser_json FROM participants"
        )
    assert (pid, study_id, session_id) == (PID, STUDY, SESSION) and completed
    assert {"browser", "os", "width", "height", "screen_width"} <= set(json.loads(browser_json))

    export = httpx.get(f"{base}/admin/responses.csv", headers={"Authorization": f"Bearer {ADMIN}"})
    assert export.status_code == 200
    exported = list(csv.DictReader(io.StringIO(export.text)))
    assert len(exported) == 22 * 10  # 23 trials minus the attention check, ten categories each
    assert all(float(r["rt"]) >= float(r["first_reaction_rt"]) > 0 for r in exported)
    assert sorted({int(r["trial"]) for r in exported}) == list(range(1, 23))
    path = database.parent / "responses.csv"
    path.write_text(export.text)
    assert len(read_human_ratings(path).rows) == 220


def test_a_second_browser_on_the_same_submission_stops_the_first_page(live_server):
    from playwright.sync_api import sync_playwright

    base, database, instructed = live_server
    url = f"{base}/?PROLIFIC_PID={PID}&STUDY_ID={STUDY}&SESSION_ID={SESSION}"
    expected: dict[int, list[int]] = {}
    redirected: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        first = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        first.route(
            "https://app.prolific.co/**",
            lambda route: (redirected.append(route.request.url), route.fulfill(body="<p>Prolific</p>")),
        )
        trials = _track_trials(first, database)
        first.goto(url)
        first.get_by_role("button", name="I agree").click()
        first.get_by_role("button", name="Start practice").click()
        for row in range(10):
            first.check(f'input[name="rating-{row}"][value="50"]')
        first.locator("button.rating-continue").click()
        first.get_by_role("button", name="Start the study").click()
        first.wait_for_selector(".rating-header:text-is('Image 1 of 23')")
        _answer_current(first, expected, trials, instructed)
        _wait(lambda: len(_stored(database)) == 1, 10, "the first answer")

        second = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()  # no shared storage
        second.goto(url)
        second.get_by_text("You have already rated 1 of 23 images").wait_for()

        first.wait_for_selector(".rating-header:text-is('Image 2 of 23')")
        _answer_current(first, expected, trials, instructed)  # refused: the session moved to `second`
        first.get_by_text("The study stopped: this study was continued in another browser").wait_for()
        assert "do not submit on Prolific" in first.locator("#study").inner_text()
        browser.close()
    assert redirected == [] and [p for p, _ in _stored(database)] == [1]
