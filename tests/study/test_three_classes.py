"""Bring your own model, end to end on 3 classes (issue 48's acceptance): a real image folder of 3 classes
(``dataset=folder:<path>``), two tiny models of the user's own code imported with ``import_model`` (a ``python:``
source), then synthesize (3 x 2 = 6 cells) -> export -> the served study (3 categories) -> scripted participants
-> analysis, and ``evaluate.py`` on the run. No stage after synthesis needs the dataset registered: the runs
and the bundle carry its class names, the checkpoints its description."""

from __future__ import annotations

import csv
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from controversial.api import run_command
from controversial.config import MODELS_DIR_ENV
from controversial.datasets import DATASETS
from controversial.records.manifest import read_manifest
from controversial.study.bundle import load_bundle
from controversial.study.server import ServeStudySettings, create_app
from controversial.zoo.sources import TRUSTED_MODULES_ENV

CLASSES = ("circle", "square", "star")
SIZE = 16
PER_CLASS = 15  # 3 of each class held out as the test split (folder.test_fraction 0.2)
QUICK = ["synthesis.max_steps=40", "synthesis.stop_score=0.4", "synthesis.threshold=0.3", "progress=false"]

NETS = '''
import torch
from torch import nn


class Tint(nn.Module):
    """The image's colour read through a seeded positive weighting of its pixels: both seeds read the shapes
    folder (one colour per class) right, and disagree on images whose colour varies across the image."""

    def __init__(self, seed: int, size: int = 16, n_classes: int = 3) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.where = nn.Parameter(torch.rand(size, size, generator=generator) ** 4)
        self.colour = nn.Linear(3, n_classes)
        with torch.no_grad():
            self.colour.weight.copy_(12 * torch.eye(n_classes, 3) - 4)
            self.colour.bias.zero_()

    def forward(self, x):
        weights = self.where.abs() / self.where.abs().sum()
        return self.colour((x * weights).sum((2, 3)))


def tint(seed: int = 0):
    return Tint(seed)
'''


def write_shapes(root: Path) -> Path:
    """``<root>/<class>/<i>.png``: each class drawn in its own colour (red, green, blue) on a noisy background."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    for k, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(PER_CLASS):
            pixels = rng.integers(20, 70, (SIZE, SIZE, 3), dtype=np.uint8)
            pixels[..., k] += 120
            image = Image.fromarray(pixels)
            draw, (x, y) = ImageDraw.Draw(image), rng.integers(2, 6, 2)
            colour = tuple(int(c) for c in 255 * np.eye(3, dtype=int)[k])
            if name == "circle":
                draw.ellipse((x, y, x + 9, y + 9), outline=colour)
            elif name == "square":
                draw.rectangle((x, y, x + 8, y + 8), outline=colour)
            else:
                draw.polygon([(x + 4, y), (x + 8, y + 9), (x, y + 3), (x + 9, y + 3), (x, y + 9)], outline=colour)
            image.save(root / name / f"{name}_{i:02d}.png")
    return root


@pytest.fixture(scope="module")
def shapes_models(tmp_path_factory: pytest.TempPathFactory):
    """The folder ``shapes3`` and two models imported onto it by ``import_model`` from the user's module
    ``shape_nets`` (seeds 1 and 2), into ``<models>/shapes3/``; findable by name through $CONTROVERSIAL_MODELS_DIR."""
    root = tmp_path_factory.mktemp("byom")
    folder = write_shapes(root / "shapes3")
    (root / "code").mkdir()
    (root / "code" / "shape_nets.py").write_text(textwrap.dedent(NETS))
    models = root / "models"
    before = dict(DATASETS)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(root / "code"))
        patch.setenv(TRUSTED_MODULES_ENV, "shape_nets")
        patch.setenv(MODELS_DIR_ENV, str(models))
        for seed, name in enumerate(("round", "edgy"), start=1):
            run_command(
                "import_model",
                [
                    f"name={name}",
                    f"dataset=folder:{folder}",
                    "source=python:shape_nets:tint",
                    f"arch_kwargs={{seed:{seed}}}",
                    f"input_size=[3,{SIZE},{SIZE}]",
                    "mean=[0,0,0]",
                    "std=[1,1,1]",
                    f"models_dir={models}",
                    "device=cpu",
                ],
                root / "import" / name,
            )
        yield folder, models
    sys.modules.pop("shape_nets", None)
    DATASETS.clear()
    DATASETS.update(before)


def test_imported_models_record_the_folder_and_read_it(shapes_models):
    _, models = shapes_models
    from controversial.zoo.checkpoints import read_checkpoint

    for name in ("round", "edgy"):
        info, _ = read_checkpoint(models / "shapes3" / f"{name}.pt")
        assert info.arch == "imported" and info.dataset_info is not None
        assert info.dataset_info.class_names == CLASSES and info.dataset_info.image_shape == (3, SIZE, SIZE)
        assert info.metrics["n_test"] == 9 and info.metrics["test_accuracy"] == 1.0  # colour decides the class
        assert info.calibration.method == "cross_entropy" and info.metrics["calibrated_on"].startswith("36 training")


@pytest.mark.slow
def test_three_classes_from_import_to_analysis(shapes_models, tmp_path, capsys):
    _, models = shapes_models
    sweep = tmp_path / "sweep"
    run_dir = sweep / "round_vs_edgy"
    rows = run_command("synthesize", ["model_a=round", "model_b=edgy", "max_attempts=3", *QUICK], run_dir)
    assert {r.cell for r in rows} == {(a, b) for a in range(3) for b in range(3) if a != b}  # 3 x 2 cells
    assert {r.class_a_name for r in rows} == set(CLASSES)
    recorded = json.loads((run_dir / "run_settings.json").read_text())
    assert recorded["class_names"] == list(CLASSES) and recorded["dataset"] == "shapes3"
    assert "6/6 cells accepted" in capsys.readouterr().out
    run_command("overview", [f"sweep_dir={sweep}", "progress=false"], sweep / "overview")
    assert (sweep / "overview" / "fig2_0_1.png").is_file()  # no classes 7 and 3: the first two
    assert (sweep / "overview" / "fig3_round_vs_edgy.png").is_file()

    DATASETS.pop("shapes3")  # as in a new process: evaluate's models register it (their checkpoints describe it)
    out = tmp_path / "evaluate"  # the model responses of the imported models, by name, on the run
    run_command("evaluate", ["models=[round,edgy]", f"manifests=[{run_dir}]", f"models_dir={models}"], out)
    with (out / "model_responses.csv").open() as handle:
        responses = list(csv.DictReader(handle))
    assert len(responses) == 2 * 6 * 3  # 2 models x 6 stimuli x 3 categories
    assert {row["response_category"] for row in responses} == set(CLASSES)

    DATASETS.pop("shapes3")  # downstream of synthesis the runs carry the dataset: export registers it from them
    bundle_dir = run_command(
        "export_study",
        [
            f"sweep_dir={sweep}",
            f"studies_dir={tmp_path / 'studies'}",
            "name=shapes",
            "per_pair=3",
            "natural_per_class=1",
            "n_repeats=2",
            "n_attention=2",
            "n_demo=1",
            "pilot=true",
        ],
        tmp_path / "export",
    )
    bundle = load_bundle(bundle_dir)
    assert bundle.spec.categories == CLASSES and bundle.spec.dataset == "shapes3"
    kinds = [e.kind for e in bundle.key.values()]
    assert kinds.count("controversial") == 3 and kinds.count("natural") == 3  # one natural image per class
    assert {e.true_class for e in bundle.key.values() if e.kind == "natural"} == set(CLASSES)  # from the folder

    serve = ServeStudySettings(
        study_dir=str(bundle_dir), completion_code="C0DE42", database_url=f"sqlite:///{tmp_path / 'r.db'}"
    )
    app = create_app(serve, "three-classes-admin-token-0123456789-abcdef")
    with TestClient(app) as client:
        page = client.get("/api/study").json()
    app.state.engine.dispose()
    assert page["categories"] == list(CLASSES)  # the rating page's rows

    DATASETS.pop("shapes3")  # evaluate's models register it, before the stimuli's names are read with its classes
    out = tmp_path / "evaluate_bundle"
    run_command("evaluate", ["models=[round,edgy]", f"images={bundle_dir / 'stimuli'}", f"models_dir={models}"], out)
    with (out / "model_responses.csv").open() as handle:
        images = {row["image"] for row in csv.DictReader(handle)}
    assert len(images) == 3 + 3  # the bundle's controversial and natural images (repeats listed once)

    DATASETS.pop("shapes3")  # the pilot's models register it: their checkpoints describe it
    out = tmp_path / "pilot"
    results = run_command(
        "pilot_study",
        [f"study_dir={bundle_dir}", "rater=round", "participants=3", f"models_dir={models}", "resamples=0"],
        out,
    )
    assert "pilot: 3 scripted participants" in capsys.readouterr().out
    for table in ("responses.csv", "model_responses.csv"):  # people's ratings and the models', per category
        with (out / table).open() as handle:
            assert {row["response_category"] for row in csv.DictReader(handle)} == set(CLASSES)
    assert set(results.ranking) == {"round", "edgy"}


def test_classes_subset_synthesizes_its_cells_only(shapes_models, tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["model_a=round", "model_b=edgy", "max_attempts=1", "synthesis.classes=[star,0]", *QUICK]
    rows = run_command("synthesize", overrides, run_dir)
    assert sorted(r.cell for r in read_manifest(run_dir / "manifest.csv")) == [(0, 2), (2, 0)]
    assert {(r.class_a_name, r.class_b_name) for r in rows} == {("circle", "star"), ("star", "circle")}
    assert json.loads((run_dir / "run_settings.json").read_text())["synthesis"]["classes"] == [0, 2]
    assert (run_dir / "grid.png").is_file()


def test_three_classes_design_study(shapes_models, tmp_path):
    """``design_study.py`` on a 3-class sweep: the pool, the balanced yardstick (natural images from the folder's
    test split) and the bundle follow the 3 classes."""
    _, models = shapes_models
    overrides = ["model_a=round", "model_b=edgy", "max_attempts=3", "seeds_per_cell=2", *QUICK]
    run_command("synthesize", overrides, tmp_path / "sweep" / "round_vs_edgy")
    path = run_command(
        "design_study",
        [
            f"sweep_dir={tmp_path / 'sweep'}",
            "name=designed3",
            "models=[round,edgy]",
            f"models_dir={models}",
            f"studies_dir={tmp_path / 'studies'}",
            "pilot=true",
            "budget.trials=12",
            "budget.n_repeats=1",
            "budget.n_attention=1",
            "budget.natural_per_class=1",
            "budget.natural_candidates_per_class=3",
            "budget.seeds_per_cell=2",
            "budget.class_tolerance=0.5",
            "plan.n_participants=6",
            "plan.n_panel=4",
            "plan.max_exchanges=5",
            "display.size=32",
            "n_demo=0",
        ],
        tmp_path / "design",
    )
    bundle = load_bundle(path)
    assert bundle.spec.categories == CLASSES
    natural = [e.true_class for e in bundle.key.values() if e.kind == "natural"]
    assert sorted(natural) == sorted(CLASSES)  # one natural image per class
