"""ImageNet models on the 16 entry-level categories (issue 48, item 3): two tiny 1000-output timm models (a ResNet
and a ViT, random weights saved as the user's files) imported onto a small ``imagenet16:<path>`` folder at 224 px,
a controversial pair on a 3-category subset, their responses over the 16 categories, and ``evaluate.py
decisions.enabled=true decisions.readout=imagenet16`` writing the arg-max of the mean fine-class probabilities."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from controversial.api import run_command
from controversial.config import MODELS_DIR_ENV
from controversial.datasets import DATASETS, IMAGENET16_CLASSES, imagenet16_categories
from controversial.records.choices import read_trials
from controversial.synthesis.stimuli import load_png, save_png

timm = pytest.importorskip("timm")

SIZE = 224  # the folder's images, as describe_dataset stores imagenet16 by default
PAIR = {"resnet_in": "test_resnet", "vit_in": "test_vit"}


def write_imagenet16(root: Path, per_category: int = 3) -> Path:
    """``<root>/<category>/<i>.png`` for the 16 categories: random 224 px colour images (1 of 3 held out as test)."""
    rng = np.random.default_rng(0)
    for category in IMAGENET16_CLASSES:
        for i in range(per_category):
            save_png(root / category / f"{i}.png", rng.random((3, SIZE, SIZE)))
    return root


def mean_fine_probabilities(net: torch.nn.Module, pixels: torch.Tensor, input_size: int) -> torch.Tensor:
    """(N, 16) mean softmax probability of each category's fine ImageNet classes, computed from the bare network
    (timm's own preprocessing: shrink with antialiasing, normalise by 0.5/0.5), independently of the readout."""
    from timm.data import ImageNetInfo

    index = {wnid: k for k, wnid in enumerate(ImageNetInfo().label_names())}
    x = F.interpolate(pixels, (input_size, input_size), mode="bilinear", antialias=True)
    with torch.no_grad():
        p = torch.softmax(net.eval()((x - 0.5) / 0.5).double(), dim=1)
    return torch.stack([p[:, [index[w] for w in wnids]].mean(1) for wnids in imagenet16_categories().values()], 1)


@pytest.fixture
def imagenet_pair(tmp_path, monkeypatch):
    """The two models imported with ``import_model`` (float32 weights, as the user's files hold them)."""
    folder = write_imagenet16(tmp_path / "in16")
    models = tmp_path / "models"
    monkeypatch.setenv(MODELS_DIR_ENV, str(models))
    before = dict(DATASETS)
    nets = {}
    for seed, (name, arch) in enumerate(PAIR.items(), start=1):
        torch.manual_seed(seed)
        nets[name] = timm.create_model(arch)  # num_classes=1000: ImageNet's outputs
        torch.save(nets[name].state_dict(), tmp_path / f"{arch}.pt")
        overrides = [f"name={name}", f"dataset=imagenet16:{folder}", f"source=timm:{arch}"]
        overrides += [f"weights={tmp_path / f'{arch}.pt'}", f"models_dir={models}", "device=cpu", "float16=false"]
        run_command("import_model", [*overrides, "update_model_card=false"], tmp_path / "import" / name)
    yield models, nets
    DATASETS.clear()
    DATASETS.update(before)


def test_two_imagenet_models_are_a_pair_on_16_categories(imagenet_pair, tmp_path, capsys):
    models, nets = imagenet_pair
    run_dir = tmp_path / "pair"
    overrides = ["model_a=resnet_in", "model_b=vit_in", "synthesis.classes=[cat,dog,bear]", "max_attempts=1"]
    overrides += ["synthesis.max_steps=4", "synthesis.threshold=0.01", "progress=false"]
    rows = run_command("synthesize", overrides, run_dir)
    cat, dog, bear = (IMAGENET16_CLASSES.index(c) for c in ("cat", "dog", "bear"))
    assert sorted(r.cell for r in rows) == sorted(
        [(cat, dog), (dog, cat), (cat, bear), (bear, cat), (dog, bear), (bear, dog)]
    )
    assert load_png(run_dir / rows[0].image_file).shape == (3, SIZE, SIZE)  # people see the folder's 224 px

    DATASETS.pop("imagenet16")  # as in a new process: evaluate's models describe the dataset
    run_command("evaluate", ["models=[resnet_in,vit_in]", f"images={run_dir}"], tmp_path / "responses")
    with (tmp_path / "responses" / "model_responses.csv").open() as handle:
        responses = list(csv.DictReader(handle))
    assert len(responses) == 2 * 6 * 16 and {r["response_category"] for r in responses} == set(IMAGENET16_CLASSES)

    labelled = tmp_path / "labelled"  # benchmark-named: <trial>_<exp>_<subject>_<condition>_<category>_...
    rng = np.random.default_rng(1)
    names = [f"{k:04d}_in16_dnn_c1_{c}_00_img{k}.png" for k, c in enumerate(IMAGENET16_CLASSES)]
    for name in names:
        save_png(labelled / name, rng.random((3, SIZE, SIZE)))
    overrides = ["models=[resnet_in,vit_in]", f"images={labelled}", "decisions.enabled=true"]
    folder = run_command("evaluate", [*overrides, "decisions.readout=imagenet16"], tmp_path / "decisions")
    pixels = torch.from_numpy(np.stack([load_png(labelled / name) for name in names]))
    for name, net in nets.items():
        trials = read_trials([folder / f"labelled_{name}_session_1.csv"])
        assert [t.image for t in trials] == names and [t.category for t in trials] == list(IMAGENET16_CLASSES)
        p = mean_fine_probabilities(net, pixels, 160)  # timm's test models take 160 px
        chosen = p[torch.arange(len(names)), [IMAGENET16_CLASSES.index(t.response) for t in trials]]
        assert torch.all(chosen >= p.max(1).values * (1 - 1e-4))  # the arg-max over the 16 (up to float ties)
