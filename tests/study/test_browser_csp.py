"""Every page a participant can see runs under the server's Content-Security-Policy without one violation.

The policy allows no inline style (``style-src 'self'``), so a ``style="..."`` attribute in HTML that a plugin
writes, or a ``<style>`` element, is blocked and logged to the console: harmless-looking noise that hides a
real violation and leaves the element unstyled. Headless Chromium (Debian's, via Playwright, as in
``test_browser_e2e.py``) visits each page against a live server with production settings and collects the
console's CSP reports and the document's ``securitypolicyviolation`` events, page by page: the status pages
(no Prolific ID, an id the server refuses, consent declined, already completed, continued in another browser),
consent, instructions, the practice images' preload, a practice and a real rating trial, the welcome-back page
and the end page.
"""

from __future__ import annotations

import httpx
import pytest
from helpers import WEB_SOURCE, fake_mnist_test, make_sweep, study_server

from controversial.study.export import ExportOptions, export_study

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
CODE = "CSPCODE"
ADMIN = "csp-admin-token-0123456789abcdefghijklmnop"
SESSION = "6123456789abcdef01234567"
STUDY = "60aa11bb22cc33dd44ee55ff"
# Collects violations in the page itself too: a console message is what the participant's browser shows, the
# event also names the directive; an init script runs before the page's own scripts and is not subject to CSP.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${e.sample || ""})`));
"""


@pytest.fixture
def server(tmp_path, chromium, web_assets):
    bundle = export_study(
        make_sweep(tmp_path / "sweep", pairs=(("abs", "vgg"),)),
        tmp_path / "studies",
        ExportOptions(name="csp", per_pair=10, natural_per_class=1, n_repeats=2, n_attention=1, n_demo=1, pilot=True),
        fake_mnist_test,
        WEB_SOURCE,
    )
    with study_server(
        bundle, tmp_path, tmp_path / "csp.db", CODE, "csp-admin-token-0123456789abcdefghijklmnop"
    ) as base:
        yield base


class Pages:
    """One browser context per participant. Violation events are filed under the page on screen when they fired;
    console reports, which arrive asynchronously, are kept in one list."""

    def __init__(self, browser) -> None:
        self.browser, self.found, self.console = browser, {}, []

    def open(self, url: str | None = None):
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(RECORD_VIOLATIONS)
        context.route("https://app.prolific.co/**", lambda route: route.fulfill(body="<p>Prolific</p>"))
        page = context.new_page()
        page.on("console", lambda m: self.console.append(m.text) if "Content Security Policy" in m.text else None)
        if url:
            page.goto(url)
        return page

    def seen(self, page, name: str, text: str) -> None:
        """Wait until ``text`` shows, then file the page's recorded violations under ``name``."""
        page.get_by_text(text).first.wait_for()
        violations = page.evaluate("window.__csp.splice(0)")
        if violations:
            self.found.setdefault(name, []).extend(violations)


def _rate(page, value: int = 50) -> None:
    for row in range(10):
        page.check(f'input[name="rating-{row}"][value="{value}"]')
    page.locator("button.rating-continue").click()


def _answer_over_http(base: str, page, pid: str, positions: range) -> None:
    """Answers as the page would send them, with the page's own token: reaching the end page takes no clicks."""
    token = page.evaluate(f"localStorage.getItem('controversial-study:/:{pid}')")
    arrival = {"prolific_pid": pid, "study_id": STUDY, "session_id": SESSION, "token": token}
    trials = {t["position"]: t["stimulus_id"] for t in httpx.post(f"{base}/api/session", json=arrival).json()["trials"]}
    categories = httpx.get(f"{base}/api/study").json()["categories"]
    for position in positions:
        answer = {
            "position": position,
            "stimulus_id": trials[position],
            "ratings": dict.fromkeys(categories, 0),
            "rt_ms": 1000,
            "first_reaction_rt_ms": 500,
        }
        assert httpx.post(f"{base}/api/sessions/{token}/responses", json=answer).status_code == 201


def test_no_page_logs_a_content_security_policy_violation(server):
    from playwright.sync_api import sync_playwright

    base = server
    pid, decliner, switcher = (f"5f0c1e2d3b4a59687766554{k}" for k in range(3))
    url = f"{base}/?PROLIFIC_PID={pid}&STUDY_ID={STUDY}&SESSION_ID={SESSION}"
    with sync_playwright() as playwright:
        pages = Pages(playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS))
        pages.seen(pages.open(f"{base}/"), "no Prolific ID", "has to be opened from its link on Prolific")
        pages.seen(pages.open(f"{base}/?PROLIFIC_PID=nope"), "id refused", "The study could not start")
        declining = pages.open(url.replace(pid, decliner))
        pages.seen(declining, "consent", "I do not agree")
        declining.get_by_role("button", name="I do not agree").click()
        pages.seen(declining, "consent declined", "You did not consent")

        page = pages.open(url)
        pages.seen(page, "consent", "I agree")
        page.get_by_role("button", name="I agree").click()
        pages.seen(page, "instructions", "Start practice")
        page.get_by_role("button", name="Start practice").click()
        pages.seen(page, "practice trial (after the preload)", "Practice image 1 of 1")
        _rate(page)
        pages.seen(page, "practice over", "Practice is over")
        page.get_by_role("button", name="Start the study").click()
        pages.seen(page, "rating trial", "Image 1 of 23")
        _rate(page)
        pages.seen(page, "rating trial", "Image 2 of 23")

        _answer_over_http(base, page, pid, range(2, 23))
        page.reload()
        pages.seen(page, "welcome back", "You have already rated 22 of 23 images")
        page.get_by_role("button", name="Continue").click()
        pages.seen(page, "rating trial", "Image 23 of 23")
        _rate(page, 0)  # the end page ("Saving", then "All your answers are saved") goes on to Prolific at once:
        page.wait_for_url(f"https://app.prolific.co/submissions/complete?cc={CODE}")  # its console reports count
        page.goto(url)
        pages.seen(page, "already completed", "You have already completed this study")

        first = pages.open(url.replace(pid, switcher))
        first.get_by_role("button", name="I agree").click()
        first.get_by_role("button", name="Start practice").click()
        _rate(first)
        first.get_by_role("button", name="Start the study").click()
        first.get_by_text("Image 1 of 23").wait_for()
        second = pages.open(url.replace(pid, switcher))  # no shared storage: it takes the session over
        pages.seen(second, "continued in a second browser", "Start practice")
        _rate(first)  # refused: the session moved to the second browser
        pages.seen(first, "stopped: continued in another browser", "The study stopped")
        first.wait_for_timeout(200)  # the last console reports
        pages.browser.close()
    assert pages.found == {}, "\n".join(f"{name}: {errors}" for name, errors in pages.found.items())
    assert pages.console == [], pages.console
