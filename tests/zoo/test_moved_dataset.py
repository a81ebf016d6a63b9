"""An imported model's image folder may move (a laptop's /home/me/data/pets is a cluster's /scratch/me/pets): the
location is where the images were found, not part of the dataset's identity. Tiny folders of PNGs, a two-class
``python:`` model, no data root: the whole module runs in about a second."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from controversial.api import run_command
from controversial.config import MODELS_DIR_ENV, load_sidecar, sidecar_files
from controversial.data import CACHE_DIR_ENV, load_uint8
from controversial.datasets import DATASETS, FolderOptions, dataset_info, describe_dataset, register_dataset
from controversial.errors import UserError
from controversial.records.runs import run_classes
from controversial.synthesis.runstate import check_run_settings
from controversial.zoo.bundled import load_model
from controversial.zoo.importing import ImportOptions, import_model
from controversial.zoo.sources import TRUSTED_MODULES_ENV

NETS = """
import torch


def brightness(n_classes: int = 2):
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(n_classes))
    net(torch.zeros(1, 1, 8, 8))
    return net
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Registrations stay inside the test; no decoded cache, so images are read from the folder each time."""
    monkeypatch.setenv(CACHE_DIR_ENV, "off")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "moved_nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.setenv(TRUSTED_MODULES_ENV, "moved_nets")
    saved = dict(DATASETS)
    yield
    DATASETS.clear()
    DATASETS.update(saved)


def write_folder(root: Path, classes: tuple[str, ...] = ("cat", "dog"), per_class: int = 4) -> Path:
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def imported(tmp_path: Path, folder: Path, name: str = "mine") -> Path:
    settings = ImportOptions(
        name=name,
        dataset=f"folder:{folder}",
        source="python:moved_nets:brightness",
        input_size=[1, 8, 8],
        mean=[0.5],
        std=[0.5],
        models_dir=str(tmp_path / "models"),
        device="cpu",
        folder=FolderOptions(test_fraction=0.25),
    )
    return import_model(settings)


def moved(folder: Path, to: Path) -> Path:
    """The folder copied to ``to`` and removed where it was, and this process forgetting it (a new process)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder, to)
    shutil.rmtree(folder)
    DATASETS.pop("pets")
    return to


def test_a_model_imported_on_a_folder_that_moved_is_used_with_the_folder_where_it_is_now(tmp_path):
    laptop = write_folder(tmp_path / "laptop" / "pets")
    imported(tmp_path, laptop)
    before = load_uint8("pets", "test")
    cluster = moved(laptop, tmp_path / "cluster" / "pets")
    assert load_model("mine", models_dir=tmp_path / "models").class_names == ("cat", "dog")  # records the laptop's
    assert dataset_info("pets").location == laptop
    describe_dataset(f"folder:{cluster}", FolderOptions(test_fraction=0.25))  # dataset=folder:<where it is now>
    assert dataset_info("pets").location == cluster
    after = load_uint8("pets", "test")
    assert torch.equal(after[0], before[0]) and torch.equal(after[1], before[1])
    # a second model imported on the cluster (its calibration reads the images there) beside the first one
    imported(tmp_path, cluster, name="second")
    DATASETS.pop("pets")  # a later command: both model files register, one says laptop, the other cluster
    assert [load_sidecar(path).name for path in sidecar_files([tmp_path / "models"])] == ["mine", "second"]
    assert dataset_info("pets").location == cluster  # the one that exists here, whichever file came first
    assert torch.equal(load_uint8("pets", "train")[1], torch.tensor([0, 0, 0, 1, 1, 1]))


def test_a_moved_folder_is_found_in_the_data_root_under_its_own_name(tmp_path):
    laptop = write_folder(tmp_path / "laptop" / "pets")
    imported(tmp_path, laptop)
    moved(laptop, tmp_path / "scratch" / "pets")
    load_model("mine", models_dir=tmp_path / "models")
    images, labels = load_uint8("pets", "test", root=tmp_path / "scratch")  # data.root=... as for CIFAR-10
    assert images.shape == (2, 1, 8, 8) and labels.tolist() == [0, 1]
    assert dataset_info("pets").location == tmp_path / "scratch" / "pets"


def test_rank_natural_reads_a_moved_folder_from_the_data_root(tmp_path, monkeypatch):
    """The command as on a cluster: both models imported on a laptop, the folder now in the data root."""
    laptop = write_folder(tmp_path / "laptop" / "pets")
    imported(tmp_path, laptop, "first")
    imported(tmp_path, laptop, "second")
    moved(laptop, tmp_path / "scratch" / "pets")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    out = tmp_path / "ranked"
    args = ["model_a=first", "model_b=second", f"data.root={tmp_path / 'scratch'}", "device=cpu", "progress=false"]
    rows = run_command("rank_natural", args, out)
    assert {(r.class_a_name, r.class_b_name) for r in rows} == {("cat", "dog"), ("dog", "cat")}
    recorded = json.loads((out / "run_settings.json").read_text())["dataset_info"]
    assert recorded["source"] == f"folder:{tmp_path / 'scratch' / 'pets'}"  # where export will find the images


def test_another_dataset_under_the_same_name_is_refused(tmp_path):
    imported(tmp_path, write_folder(tmp_path / "laptop" / "pets"))
    other = write_folder(tmp_path / "other" / "pets", ("cat", "owl"))
    with pytest.raises(UserError, match=r"'pets' is already known .*class_names \['cat', 'dog'\] vs \['cat', 'owl'\]"):
        describe_dataset(f"folder:{other}", FolderOptions(test_fraction=0.25))
    moved(tmp_path / "laptop" / "pets", tmp_path / "gone" / "pets")
    shutil.rmtree(tmp_path / "gone")
    load_model("mine", models_dir=tmp_path / "models")
    with pytest.raises(UserError, match=r"other/pets is not the folder it describes: it holds class subfolders of "):
        load_uint8("pets", "test", root=tmp_path / "other")  # found by its name in the data root: another dataset


def test_neither_location_existing_is_an_error_naming_both(tmp_path):
    laptop = write_folder(tmp_path / "laptop" / "pets")
    imported(tmp_path, laptop)
    cluster = moved(laptop, tmp_path / "cluster" / "pets")
    load_model("mine", models_dir=tmp_path / "models")  # the checkpoint says laptop
    register_dataset(dataset_info("pets").at(cluster))  # a run record says cluster
    shutil.rmtree(cluster)
    with pytest.raises(UserError) as refused:
        load_uint8("pets", "test", root=tmp_path / "data")
    message = str(refused.value)
    assert "'pets': its image folder is not on this machine" in message
    assert all(str(path) in message for path in (laptop, cluster, tmp_path / "data" / "pets"))


def test_a_run_dir_resumes_where_the_folder_moved_and_records_the_new_place(tmp_path):
    laptop = write_folder(tmp_path / "laptop" / "pets")
    info = describe_dataset(f"folder:{laptop}")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_run_settings(run_dir, {"seed": 0, "dataset_info": info.to_dict()})
    cluster = moved(laptop, tmp_path / "cluster" / "pets")
    check_run_settings(run_dir, {"seed": 0, "dataset_info": info.at(cluster).to_dict()})
    recorded = json.loads((run_dir / "run_settings.json").read_text())
    assert recorded == {"seed": 0, "dataset_info": info.at(cluster).to_dict()}
    other = info.to_dict() | {"class_names": ["cat", "owl"]}
    with pytest.raises(UserError, match="holds a run made with other settings .*dataset_info"):
        check_run_settings(run_dir, {"seed": 0, "dataset_info": other})


def test_runs_made_on_two_machines_give_export_the_folder_that_exists_here(tmp_path):
    here = write_folder(tmp_path / "cluster" / "pets")
    info = describe_dataset(f"folder:{here}")
    manifests = []
    for run, location in (("on_laptop", tmp_path / "laptop" / "pets"), ("on_cluster", here)):
        (tmp_path / run).mkdir()
        record = {"dataset": "pets", "class_names": ["cat", "dog"], "dataset_info": info.at(location).to_dict()}
        (tmp_path / run / "run_settings.json").write_text(json.dumps(record))
        manifests.append(tmp_path / run / "manifest.csv")
    for order in (manifests, manifests[::-1]):
        described = run_classes(order, []).described
        assert described is not None and described.location == here
