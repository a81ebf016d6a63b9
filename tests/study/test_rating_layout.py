"""The rating page shows one row per category, with its name, for any class count: 3 categories, MNIST's 10, and
the 16 ImageNet entry-level ones all fit, with Continue, in the smallest window the study admits (800 x 600).
The plugin runs in headless Chromium with jsPsych's and the study's stylesheets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import WEB_SOURCE

pytestmark = pytest.mark.browser

ENTRY_LEVEL = ["airplane", "bear", "bicycle", "bird", "boat", "bottle", "car", "cat"]
ENTRY_LEVEL += ["chair", "clock", "dog", "elephant", "keyboard", "knife", "oven", "truck"]
GREY = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='224' height='224'/%3E"


def _page(folder: Path, web_assets: Path, categories: list[str]) -> Path:
    trial = {"image": GREY, "categories": categories, "header": "Image 3 of 120", "image_size": 224}
    page = folder / f"rating_{len(categories)}.html"
    page.write_text(
        f"""<!doctype html><html><head>
<link rel="stylesheet" href="{(web_assets / "jspsych" / "css" / "jspsych.css").as_uri()}">
<link rel="stylesheet" href="{(WEB_SOURCE / "style.css").as_uri()}">
<script>window.jsPsychModule = {{ParameterType: {{IMAGE: 1, STRING: 2, INT: 3, COMPLEX: 4}}}};</script>
<script src="{(WEB_SOURCE / "rating-plugin.js").as_uri()}"></script></head>
<body><div class="jspsych-display-element"><div class="jspsych-content-wrapper">
<div class="jspsych-content" id="trial"></div></div></div>
<script>
const defaults = {{levels: [0, 25, 50, 75, 100], question: "How likely is it that the image shows each of these?",
                   button_label: "Continue"}};
new jsPsychRateCategories({{finishTrial() {{}}}}).trial(document.getElementById("trial"),
                                                          {{...defaults, ...{json.dumps(trial)}}});
</script></body></html>""",
        encoding="utf-8",
    )
    return page


@pytest.mark.parametrize("categories", [["circle", "square", "star"], [str(d) for d in range(10)], ENTRY_LEVEL])
def test_every_category_is_a_row_and_continue_fits_the_smallest_window(tmp_path, web_assets, chromium, categories):
    from playwright.sync_api import sync_playwright

    page_file = _page(tmp_path, web_assets, categories)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(viewport={"width": 800, "height": 600})
            page.goto(page_file.as_uri())
            rows = page.locator("table.rating-grid th.category").all_text_contents()
            bottom = page.locator("button.rating-continue").bounding_box()
            compact = page.locator("table.rating-grid.compact").count()
        finally:
            browser.close()
    assert rows == categories
    assert bottom is not None and bottom["y"] + bottom["height"] <= 600
    assert compact == (len(categories) > 10)  # MNIST's page is as before
