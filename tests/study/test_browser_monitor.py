"""The monitor page and the preview in headless Chromium against a live server: nothing shows without the admin
token, the counts on the page are the database's after scripted participants, an export button downloads the
table, a preview walks through the study with a banner on every page and stores nothing, and no page logs a
Content-Security-Policy violation. ``STUDY_SCREENSHOTS=docs/img`` keeps the screenshots for the docs."""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import httpx
import pytest
from helpers import study_server
from sqlalchemy import create_engine

from controversial.study.bundle import load_bundle
from controversial.study.presentations import resolver
from controversial.study.scripted_participants import instructions, take_study

from .conftest import one_pair_pilot

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ADMIN = "monitor-browser-token-0123456789abcdefghijkl"
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${e.sample || ""})`));
"""


def screenshot(page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("STUDY_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)


@pytest.fixture
def live(tmp_path, chromium, web_assets):
    bundle = one_pair_pilot(tmp_path, "monitor")
    with study_server(bundle, tmp_path / "run", tmp_path / "monitor.db", "MONCODE", ADMIN) as base:
        yield base, bundle, tmp_path / "monitor.db"


def _attentive(database: Path) -> dict:
    """What an attentive person does: answer the checks as they ask (the ids served, resolved in the database)."""
    return {"resolve": resolver(create_engine(f"sqlite:///{database}"))}


def _participants(base: str, bundle: Path, database: Path) -> None:
    """Three who finish, one halfway, one who arrived and has not consented (Prolific-format ids)."""
    instructed = instructions(load_bundle(bundle))
    with httpx.Client(base_url=base, timeout=30) as client:
        for k in range(3):
            take_study(client, f"{k:024x}", random.Random(k), instructed=instructed, **_attentive(database))
        arrival = {"prolific_pid": f"{7:024x}", "study_id": "a" * 24, "session_id": "b" * 24}
        state = client.post("/api/session", json=arrival).json()
        client.post(f"/api/sessions/{state['token']}/consent", json={"consent": True, "browser": {}})
        categories = client.get("/api/study").json()["categories"]
        for trial in state["trials"][:4]:
            body = {"position": trial["position"], "stimulus_id": trial["stimulus_id"], "rt_ms": 4000.0}
            body |= {"ratings": dict.fromkeys(categories, 50), "first_reaction_rt_ms": 900.0}
            assert client.post(f"/api/sessions/{state['token']}/responses", json=body).status_code == 201
        client.post("/api/session", json={**arrival, "prolific_pid": f"{8:024x}", "session_id": "c" * 24})


def _database_counts(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as connection:
        one = lambda sql: connection.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "started": one("SELECT COUNT(*) FROM participants"),
            "completed": one("SELECT COUNT(*) FROM participants WHERE completed_at IS NOT NULL"),
            "in_progress": one(
                "SELECT COUNT(*) FROM participants WHERE consented_at IS NOT NULL AND completed_at IS NULL"
            ),
            "not_consented": one("SELECT COUNT(*) FROM participants WHERE consented_at IS NULL"),
            "answers_total": one("SELECT COUNT(*) FROM responses"),
        }


def test_the_monitor_shows_the_database_to_the_token_only(live, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    base, bundle, database = live
    _participants(base, bundle, database)
    expected = _database_counts(database)
    assert expected == {"started": 5, "completed": 3, "in_progress": 1, "not_consented": 1, "answers_total": 73}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1100, "height": 900}, accept_downloads=True)
        context.add_init_script(RECORD_VIOLATIONS)
        console: list[str] = []
        page = context.new_page()
        page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
        page.goto(f"{base}/monitor")
        page.get_by_text("Show the study").wait_for()
        assert page.locator("#figures").is_hidden() and page.locator("#started").inner_text() == ""
        page.fill("#token", "not-the-token-0123456789abcdefghijklmn")
        page.get_by_role("button", name="Show the study").click()
        page.get_by_text("admin token missing or wrong").wait_for()
        assert page.locator("#figures").is_hidden() and page.locator("#started").inner_text() == ""

        page.fill("#token", ADMIN)
        page.get_by_role("button", name="Show the study").click()
        page.locator("#figures").wait_for(state="visible")
        shown = {name: int(page.locator(f"#{name}").inner_text()) for name in expected}
        assert shown == expected
        assert page.locator("#progress tr").count() == 1 and "5 of" in page.locator("#progress").inner_text()
        # scripts answer faster than the server's clock lets a person: every one who answered is flagged
        assert page.locator("#flag-too_fast").inner_text() == "4"
        screenshot(page, tmp_path, "study_monitor.png")

        with httpx.Client(base_url=base) as client:  # one more finishes; the page refreshes by itself (5 s)
            attentive = instructions(load_bundle(bundle))
            take_study(client, f"{9:024x}", random.Random(9), instructed=attentive, **_attentive(database))
        expect(page.locator("#completed")).to_have_text("4", timeout=20000)
        assert int(page.locator("#started").inner_text()) == _database_counts(database)["started"] == 6

        with page.expect_download() as download:
            page.locator("button[data-table='participants.csv']").click()
        saved = Path(download.value.path()).read_text()
        assert (
            saved.splitlines()[0].startswith("subject,prolific_pid") and len(saved.splitlines()) == 1 + 6
        )  # everyone, with a status

        page.get_by_role("button", name="Forget the token").click()
        page.reload()
        page.get_by_text("Show the study").wait_for()
        assert page.locator("#figures").is_hidden()
        violations = page.evaluate("window.__csp")
        browser.close()
    assert violations == [] and console == [], (violations, console)


def test_a_preview_is_marked_on_every_page_and_stores_nothing(live, tmp_path):
    from playwright.sync_api import sync_playwright

    base, _, database = live
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(RECORD_VIOLATIONS)
        page = context.new_page()
        page.goto(f"{base}/?preview=1")
        banner = page.locator("#preview-banner")
        seen = []

        def step(text: str) -> None:
            page.get_by_text(text).first.wait_for()
            assert banner.is_visible(), text
            seen.append(text)

        step("I agree")
        page.get_by_role("button", name="I agree").click()
        step("Start practice")
        page.get_by_role("button", name="Start practice").click()
        step("Practice image 1 of 1")
        screenshot(page, tmp_path, "study_preview.png")
        _rate(page)
        step("Practice is over")
        page.get_by_role("button", name="Start the study").click()
        total = 23  # 10 controversial + 10 natural + 2 repeats + 1 attention check
        for k in range(1, total + 1):
            step(f"Image {k} of {total}")
            _rate(page)
        step("Preview finished: nothing was stored")
        assert "MONCODE" in page.locator("#status-message a").get_attribute("href")
        violations = page.evaluate("window.__csp")
        browser.close()
    assert violations == []
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT COUNT(*) FROM participants").fetchone()[0] == 0
        assert connection.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0


def _rate(page, value: int = 50) -> None:
    for row in range(10):
        page.check(f'input[name="rating-{row}"][value="{value}"]')
    page.locator("button.rating-continue").click()
