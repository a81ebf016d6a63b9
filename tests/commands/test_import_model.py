"""``python import_model.py`` end to end in-process: the summary it prints, the model card, and the imported model
used by name (``model_a=<name>``) by ``synthesize.py`` and ``evaluate.py``; its errors are one paragraph."""

from __future__ import annotations

import runpy
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import controversial.data
from controversial.config import MODELS_DIR_ENV
from controversial.records.manifest import read_manifest
from controversial.zoo.sources import TRUSTED_MODULES_ENV

ROOT = Path(__file__).resolve().parents[2]

NETS = '''
import torch
from torch import nn


class Brightness(nn.Module):
    """Logits from a linear map of the image's mean intensity: a tiny differentiable classifier."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.linear = nn.Linear(4, 10)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(10, 4, generator=generator))

    def forward(self, x):
        quarters = torch.stack([q.mean((1, 2, 3)) for q in x.chunk(4, dim=-1)], 1)
        return self.linear(quarters) * 4


def build(seed: int = 0):
    return Brightness(seed)
'''


def synthetic_split(name: str, split: str, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    n = 50 if split == "train" else 30
    generator = torch.Generator().manual_seed(n)
    return torch.randint(0, 256, (n, 1, 28, 28), generator=generator, dtype=torch.uint8), torch.arange(n) % 10


def main_of(command: str, args: list[str], monkeypatch):
    monkeypatch.setattr(sys, "argv", [f"{command}.py", *args])
    return runpy.run_path(str(ROOT / f"{command}.py"))["main"]


@pytest.fixture
def imported(tmp_path, monkeypatch, capsys):
    """Two tiny models of the user's own code imported into ``tmp_path/models`` by the command line."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "brightness_nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.setattr(controversial.data, "load_uint8", synthetic_split)
    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    for name, seed in (("imp_bright_a", 1), ("imp_bright_b", 2)):
        args = [
            f"name={name}",
            "dataset=mnist",
            "source=python:brightness_nets:build",
            f"arch_kwargs={{seed:{seed}}}",
            "input_size=[1,28,28]",
            "mean=[0]",
            "std=[1]",
            f"models_dir={models}",
            "device=cpu",
            f"hydra.run.dir={tmp_path / 'runs' / name}",
        ]
        main_of("import_model", args, monkeypatch)()
    return models, capsys.readouterr().out


def test_the_command_prints_accuracy_calibration_file_and_usage(imported):
    models, printed = imported
    assert (models / "mnist" / "imp_bright_a.pt").is_file() and (models / "mnist" / "imp_bright_a.yaml").is_file()
    assert "test accuracy" in printed and "on 30 test images" in printed
    assert "calibration: cross_entropy, slope" in printed and "fitted on 50 training images" in printed
    code = (models.parent / "code").resolve()  # a python: source's module: its folder goes on PYTHONPATH
    trust = f"{TRUSTED_MODULES_ENV}=brightness_nets"  # the model calls the user's code: allowed by name
    assert f"{MODELS_DIR_ENV}={models} {trust} PYTHONPATH={code} python synthesize.py model_a=imp_bright_b" in printed
    assert f"{trust} PYTHONPATH={code} python evaluate.py models=[imp_bright_b,...]" in printed
    card = (models / "README.md").read_text()
    assert "mnist/imp_bright_a" in card and "python import_model.py name=imp_bright_a" in card
    assert 'Imported models (training time "imported"' in card and "| imported |" in card


@pytest.mark.slow
def test_an_imported_model_is_usable_by_name_in_synthesize_and_evaluate(imported, tmp_path, monkeypatch, capsys):
    models, _ = imported
    monkeypatch.setenv(MODELS_DIR_ENV, str(models))
    monkeypatch.setenv(TRUSTED_MODULES_ENV, "brightness_nets")
    run_dir = tmp_path / "pair"
    synthesize = [
        "model_a=imp_bright_a",
        "model_b=imp_bright_b",
        "synthesis.max_steps=3",
        "max_attempts=1",
        "progress=false",
        "wandb.mode=disabled",
        f"output_dir={run_dir}",
    ]
    main_of("synthesize", synthesize, monkeypatch)()
    rows = read_manifest(run_dir / "manifest.csv")
    assert len(rows) == 90 and {(r.model_a, r.model_b) for r in rows} == {("imp_bright_a", "imp_bright_b")}
    evaluate = ["models=[imp_bright_a,vgg]", f"manifests=[{run_dir}]", "include_rejected=true"]
    main_of("evaluate", [*evaluate, f"hydra.run.dir={tmp_path / 'evaluate'}"], monkeypatch)()
    assert "2 models x 90 images" in capsys.readouterr().out


def test_weights_that_do_not_fit_are_one_paragraph_exit_2(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.pt"
    torch.save({"conv.weight": torch.zeros(1)}, bad)
    monkeypatch.chdir(tmp_path)
    args = ["name=x", "dataset=mnist", "source=timm:test_resnet", f"weights={bad}", f"models_dir={tmp_path}"]
    with pytest.raises(SystemExit) as exit_:
        main_of("import_model", args, monkeypatch)()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and err.strip().count("\n") == 0, err
    assert "unexpected keys 1 (conv.weight)" in err and "missing keys" in err
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mnist").exists()


def test_a_model_file_clashing_with_a_bundled_name_stops_synthesize_with_one_paragraph(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "models" / "mnist"
    folder.mkdir(parents=True)
    (folder / "vgg.yaml").write_text("name: vgg\ndataset: mnist\narch: imported\ncheckpoint: vgg.pt\n")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main_of("synthesize", ["model_a=abs", "model_b=vgg"], monkeypatch)()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert "conf/model/vgg.yaml" in err and str(folder / "vgg.yaml") in err
