"""The repository's docs stand on their own and say what the code does (issue 60, item 11): no page points to a
folder a clone lacks, the README's serve step installs the web packages first, the documented sweep settings are
the YAML's, and the package docstring's ``build_study`` example runs on an exported study (which has repeats)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import controversial
from controversial.records.responses import write_human_ratings, write_model_responses

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.py"))]


def test_no_page_points_outside_the_repository():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/data" not in text and "/work/" not in text, page


def test_the_readme_installs_the_web_packages_before_serving():
    readme = (ROOT / "README.md").read_text()
    serve = readme.index("python serve_study.py study_dir=", readme.index("**Serve it**"))
    block_start = readme.rindex("```bash", 0, serve)
    assert "npm ci" in readme[block_start:serve]


def test_the_documented_max_attempts_of_exp1_mnist_is_the_yamls():
    configured = yaml.safe_load((ROOT / "conf" / "experiment" / "exp1_mnist.yaml").read_text())["max_attempts"]
    documented = [int(n) for n in re.findall(r"`max_attempts: (\d+)`", (ROOT / "docs" / "sweeps.md").read_text())]
    assert documented and set(documented) == {configured}


def test_the_package_example_builds_an_exported_study(tmp_path, monkeypatch):
    example = re.search(r"study = (cv\.build_study\(.*?\)) *(?:#[^\n]*)?\n", controversial.__doc__ or "", re.DOTALL)
    assert example is not None
    rows, model_rows = [], []
    for s, subject in enumerate(("P1", "P2")):
        for n, image in enumerate(("MNIST_0_1.png", "MNIST_1_2.png", "MNIST_2_1.png")):
            for repetition in (0, 1) if n == 0 else (0,):  # an export carries repeated presentations
                for k, category in enumerate(("1", "2")):
                    rating = [0.0, 0.25, 0.5, 1.0][(s + n + k + repetition) % 4]
                    rows.append([subject, image, repetition, category, "", "", "", "", rating, 0.4, 1.0, n])
    for model in ("m1", "m2"):
        for n, image in enumerate(("MNIST_0_1.png", "MNIST_1_2.png", "MNIST_2_1.png")):
            for k, category in enumerate(("1", "2")):
                model_rows.append([model, image, category, "", "", "", "", 0.1 + 0.2 * ((n + k) % 3)])
    write_human_ratings(tmp_path / "responses.csv", rows)
    write_model_responses(tmp_path / "models.csv", model_rows)
    monkeypatch.chdir(tmp_path)
    study = eval(example.group(1), {"cv": controversial})  # the docstring's own call, as written
    assert study.participants == ("P1", "P2") and len(study.stimuli) == 3
