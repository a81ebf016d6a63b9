"""Every stage follows the class count: a registered 3-class dataset and two tiny 3-class models through
synthesize (3 x 2 = 6 cells) -> export -> the served study (3 categories) -> scripted participants -> analysis.
No stage after synthesis looks the dataset up: the runs and the bundle carry its class names."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from helpers import WEB_SOURCE, run_task

from controversial.config import ModelOptions
from controversial.datasets import DATASETS, DatasetInfo, register_dataset
from controversial.records.manifest import read_manifest
from controversial.study.bundle import load_bundle
from controversial.study.export import ExportOptions, export_study
from controversial.study.server import ServeStudySettings, create_app
from controversial.synthesis.options import SynthesisOptions
from controversial.tasks import Invocation
from controversial.tasks import synthesize as synthesize_task
from controversial.zoo.archs.tiny import TinyMLP
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration

SHAPES = DatasetInfo(
    "shapes3", (3, 16, 16), ("circle", "square", "star"), "Shapes3", mirror_symmetric=False, source="folder:/shapes3"
)
QUICK = SynthesisOptions(max_steps=40, stop_score=0.4, threshold=0.3)


@pytest.fixture(scope="module")
def shapes_models(tmp_path_factory: pytest.TempPathFactory):
    """Two tiny 3-class MLPs saved as self-describing checkpoints in ``<models>/shapes3/``; the dataset is
    registered for this module only."""
    register_dataset(SHAPES)
    models = tmp_path_factory.mktemp("models")
    options = []
    for seed, name in enumerate(("round", "edgy"), start=1):
        kwargs = {"image_shape": list(SHAPES.image_shape), "hidden": 16, "seed": seed, "n_classes": 3}
        path = models / "shapes3" / f"{name}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset="shapes3",
            calibration=Calibration(1.0, -1.0, "identity"),
            dataset_info=SHAPES,
        )
        save_checkpoint(path, TinyMLP(**kwargs), info)
        options.append(
            ModelOptions(name=name, dataset="shapes3", arch="tiny_mlp", arch_kwargs=kwargs, checkpoint=str(path))
        )
    yield models, options
    DATASETS.pop(SHAPES.name)


def _natural(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """A stand-in test split of the 3-class dataset: random images, labels cycling 0, 1, 2."""
    assert dataset == "shapes3"
    labels = np.tile(np.arange(3), 8)
    return np.random.default_rng(0).integers(0, 256, (len(labels), 3, 16, 16), dtype=np.uint8), labels


def test_three_classes_from_synthesis_to_analysis(shapes_models, tmp_path, capsys):
    models_dir, (model_a, model_b) = shapes_models
    settings = synthesize_task.SynthesizeSettings(
        model_a=model_a, model_b=model_b, synthesis=QUICK, progress=False, max_attempts=3
    )
    run_dir = tmp_path / "sweep" / "round_vs_edgy"
    rows = synthesize_task.run(settings, Invocation(run_dir, "python synthesize.py"))
    assert {r.cell for r in rows} == {(a, b) for a in range(3) for b in range(3) if a != b}  # 3 x 2 cells
    assert {r.class_a_name for r in rows} == set(SHAPES.class_names)
    recorded = json.loads((run_dir / "run_settings.json").read_text())
    assert recorded["class_names"] == ["circle", "square", "star"] and recorded["dataset"] == "shapes3"
    assert "6/6 cells accepted" in capsys.readouterr().out
    run_task("overview", [f"sweep_dir={tmp_path / 'sweep'}", "progress=false"], tmp_path / "sweep" / "overview")
    assert (tmp_path / "sweep" / "overview" / "fig2_0_1.png").is_file()  # no classes 7 and 3: the first two
    assert (tmp_path / "sweep" / "overview" / "fig3_round_vs_edgy.png").is_file()

    DATASETS.pop(SHAPES.name)  # downstream of synthesis the runs carry the dataset: export registers it from them
    options = ExportOptions(
        name="shapes", per_pair=3, natural_per_class=1, n_repeats=2, n_attention=2, n_demo=1, pilot=True
    )
    bundle_dir = export_study(tmp_path / "sweep", tmp_path / "studies", options, _natural, WEB_SOURCE)
    assert DATASETS[SHAPES.name] == SHAPES
    bundle = load_bundle(bundle_dir)
    assert bundle.spec.categories == ("circle", "square", "star") and bundle.spec.dataset == "shapes3"
    kinds = [e.kind for e in bundle.key.values()]
    assert kinds.count("controversial") == 3 and kinds.count("natural") == 3  # one share per class, per side

    serve = ServeStudySettings(
        study_dir=str(bundle_dir), completion_code="C0DE42", database_url=f"sqlite:///{tmp_path / 'r.db'}"
    )
    app = create_app(serve, "three-classes-admin-token-0123456789-abcdef")
    with TestClient(app) as client:
        page = client.get("/api/study").json()
    app.state.engine.dispose()
    assert page["categories"] == ["circle", "square", "star"]  # the rating page's rows

    DATASETS.pop(SHAPES.name)  # the pilot's models register it: their checkpoints describe it
    out = tmp_path / "pilot"
    results = run_task(
        "pilot_study",
        [f"study_dir={bundle_dir}", "rater=round", "participants=3", f"models_dir={models_dir}", "resamples=0"],
        out,
    )
    assert "pilot: 3 scripted participants" in capsys.readouterr().out
    for table in ("responses.csv", "model_responses.csv"):  # people's ratings and the models', per category
        with (out / table).open() as handle:
            assert {row["response_category"] for row in csv.DictReader(handle)} == set(SHAPES.class_names)
    assert set(results.ranking) == {"round", "edgy"}


def test_classes_subset_synthesizes_its_cells_only(shapes_models, tmp_path):
    _, (model_a, model_b) = shapes_models
    settings = synthesize_task.SynthesizeSettings(
        model_a=model_a,
        model_b=model_b,
        synthesis=QUICK.model_copy(update={"classes": ["star", 0]}),
        progress=False,
        max_attempts=1,
    )
    rows = synthesize_task.run(settings, Invocation(tmp_path / "run", "python synthesize.py"))
    assert sorted(r.cell for r in read_manifest(tmp_path / "run" / "manifest.csv")) == [(0, 2), (2, 0)]
    assert {(r.class_a_name, r.class_b_name) for r in rows} == {("circle", "star"), ("star", "circle")}
    assert json.loads((tmp_path / "run" / "run_settings.json").read_text())["synthesis"]["classes"] == [0, 2]
    assert Path(tmp_path / "run" / "grid.png").is_file()


def test_three_classes_design_study(shapes_models, tmp_path, monkeypatch):
    """``design_study.py`` on a 3-class sweep: the pool, the balanced yardstick and the bundle follow the 3 classes."""
    import torch

    from controversial.tasks import design_study

    models_dir, (model_a, model_b) = shapes_models
    settings = synthesize_task.SynthesizeSettings(
        model_a=model_a, model_b=model_b, synthesis=QUICK, progress=False, max_attempts=3, seeds_per_cell=2
    )
    synthesize_task.run(settings, Invocation(tmp_path / "sweep" / "round_vs_edgy", "python synthesize.py"))
    images, labels = _natural("shapes3")
    monkeypatch.setattr(design_study, "load_uint8", lambda *args: (torch.from_numpy(images), torch.from_numpy(labels)))
    path = run_task(
        "design_study",
        [
            f"sweep_dir={tmp_path / 'sweep'}",
            "name=designed3",
            "models=[round,edgy]",
            f"models_dir={models_dir}",
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
    assert bundle.spec.categories == SHAPES.class_names
    natural = [e.true_class for e in bundle.key.values() if e.kind == "natural"]
    assert sorted(natural) == sorted(SHAPES.class_names)  # one natural image per class
