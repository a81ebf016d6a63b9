"""Stimuli at a visual angle (``display.degrees``) in headless Chromium against a live server: a scripted virtual
chinrest (the card dragged to a known width, the blind spot answered with the space bar), the measurements stored
and exported, every image drawn at degrees x px/deg CSS pixels (within 1 px), zero CSP violations under the
policy's hashes for the plugin's style attributes; a calibration that gives an implausible distance ends the study
with its reason and the row can never complete. ``STUDY_SCREENSHOTS=docs/img`` keeps the screenshots."""

from __future__ import annotations

import math
import os
import sqlite3
from pathlib import Path

import httpx
import pytest
from helpers import study_server

from .conftest import one_pair_pilot

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
ADMIN = "calibration-admin-token-0123456789abcdefghijk"
DEGREES = 6.0
CARD_MM = 85.6
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${e.sample || ""})`));
"""


@pytest.fixture
def live(tmp_path, chromium, web_assets):
    bundle = one_pair_pilot(tmp_path, "degrees", degrees=DEGREES)
    with study_server(bundle, tmp_path / "run", tmp_path / "degrees.db", "DEGCODE", ADMIN) as base:
        yield base, tmp_path / "degrees.db"


def _browser(playwright):
    browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(RECORD_VIOLATIONS)
    return browser, context.new_page()


def _shot(page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("STUDY_SCREENSHOTS") or tmp_path)
    page.screenshot(path=str(folder / name), full_page=True)


def _calibrate(page, tmp_path: Path, drag_px: int, wait_ms: int) -> None:
    """The card dragged by ``drag_px`` (its width grows by twice that), five blind-spot presses ``wait_ms``
    after each start."""
    page.get_by_role("button", name="Measure my screen").click()
    handle = page.locator("#jspsych-resize-handle")
    handle.wait_for()
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + drag_px, y, steps=8)
    page.mouse.up()
    _shot(page, tmp_path, "study_calibration_card.png")
    page.get_by_role("button", name="The box has the size of the card").click()
    page.get_by_text("Press the space bar when you are ready").wait_for()
    page.wait_for_timeout(300)  # the page gives the focus back to the study after the click (a timer)
    for rep in range(5):
        page.keyboard.press("Space")  # the ball starts
        page.wait_for_timeout(wait_ms)
        if rep == 0:
            _shot(page, tmp_path, "study_calibration_blindspot.png")
        page.keyboard.press("Space")  # "it disappeared"


def _start(page, base: str, pid: str) -> None:
    page.goto(f"{base}/?PROLIFIC_PID={pid}&STUDY_ID={'a' * 24}&SESSION_ID={'b' * 24}")
    page.get_by_role("button", name="I agree").click()
    page.get_by_role("button", name="Start practice").click()


def _rate(page) -> None:
    for row in range(10):
        page.check(f'input[name="rating-{row}"][value="50"]')
    page.locator("button.rating-continue").click()


def test_images_subtend_the_chosen_angle(live, tmp_path):
    from playwright.sync_api import sync_playwright

    base, database = live
    with sync_playwright() as playwright:
        browser, page = _browser(playwright)
        _start(page, base, "1" * 24)
        _calibrate(page, tmp_path, drag_px=37, wait_ms=2500)
        page.get_by_text("Does that seem about right?").wait_for()
        page.get_by_role("button", name="Yes").click()
        page.get_by_text("Practice image 1 of 1").wait_for()
        with sqlite3.connect(database) as connection:
            px_per_degree, distance, out = connection.execute(
                "SELECT px_per_degree, viewing_distance_mm, screened_out FROM participants"
            ).fetchone()
        assert out is None and 250 <= distance <= 1200
        card_px = 250 + 2 * 37  # the plugin doubles the drag: the card's on-screen width in CSS pixels
        card_degrees = math.degrees(2 * math.atan(CARD_MM / 2 / distance))
        assert px_per_degree == pytest.approx(card_px / card_degrees, rel=0.01)
        sizes = []

        def measure(header: str) -> None:
            page.get_by_text(header).wait_for()
            box = page.locator(".rating-stimulus img").bounding_box()
            sizes.append((box["width"], box["height"]))

        measure("Practice image 1 of 1")
        _rate(page)
        page.get_by_role("button", name="Start the study").click()
        measure("Image 1 of 23")
        _shot(page, tmp_path, "study_calibrated_trial.png")
        _rate(page)
        measure("Image 2 of 23")
        page.reload()  # a resumed session keeps its calibration: no second chinrest
        page.get_by_role("button", name="Continue").click()
        measure("Image 2 of 23")
        violations = page.evaluate("window.__csp")
        browser.close()
    assert violations == []
    for width, height in sizes:
        assert abs(width - DEGREES * px_per_degree) <= 1 and abs(height - DEGREES * px_per_degree) <= 1, sizes
    participants = httpx.get(f"{base}/admin/participants.csv", headers={"Authorization": f"Bearer {ADMIN}"}).text
    row = participants.splitlines()[1].split(",")
    header = participants.splitlines()[0].split(",")
    assert float(row[header.index("px_per_degree")]) == pytest.approx(px_per_degree, abs=0.01)
    assert float(row[header.index("viewing_distance_mm")]) == pytest.approx(distance, abs=0.01)


def test_an_implausible_calibration_ends_the_study_and_never_counts(live, tmp_path):
    from playwright.sync_api import sync_playwright

    base, database = live
    with sync_playwright() as playwright:
        browser, page = _browser(playwright)
        _start(page, base, "2" * 24)
        _calibrate(page, tmp_path, drag_px=37, wait_ms=50)  # "disappeared" at once: a distance of about 15 cm
        page.get_by_role("button", name="Yes").click()
        page.get_by_text("did not give a plausible viewing distance").wait_for()
        _shot(page, tmp_path, "study_calibration_failed.png")
        page.reload()  # told again, not restarted
        page.get_by_text("did not give a plausible viewing distance").wait_for()
        violations = page.evaluate("window.__csp")
        token = page.evaluate(f"localStorage.getItem('controversial-study:/:{'2' * 24}')")
        browser.close()
    assert violations == []
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT screened_out FROM participants").fetchone()[0] == "calibration_failed"
    refused = httpx.post(f"{base}/api/sessions/{token}/complete")
    assert refused.status_code == 409 and "screened out" in refused.json()["detail"]
