"""import_model.py never replaces a bundled model nor writes into the repository, replaces an imported model only
with ``overwrite=true``, writes by default to the user's folder that every command searches, names the dimension
a wrong ``input_size`` gets wrong, warns (with the numbers) when the model cannot be of use, and imports an
architecture with random weights for a dry run. Tiny models and synthetic images only (issue 60, items 1-4)."""

from __future__ import annotations

import hashlib
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import controversial.data
from controversial.config import MODELS_DIR_ENV, register_model_options, user_models_dirs
from controversial.datasets import dataset_info
from controversial.errors import UserError
from controversial.zoo.checkpoints import read_checkpoint
from controversial.zoo.import_checks import missing_preprocessing_message, quality_warnings, upsampling_warning
from controversial.zoo.importing import RANDOM_NOTE, ImportOptions, import_model

ROOT = Path(__file__).resolve().parents[2]

NETS = """
import torch
from torch import nn


def conv(n_classes: int = 10):
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, n_classes))


def mlp(n_classes: int = 10):
    return nn.Sequential(nn.Flatten(), nn.Linear(32 * 32, 16), nn.ReLU(), nn.Linear(16, n_classes))


def noise(n_classes: int = 10):
    # large logits that carry nothing about the class: chance accuracy, and a calibration that flattens them
    linear = nn.Linear(28 * 28, n_classes)
    with torch.no_grad():
        linear.weight.normal_(0, 1e4, generator=torch.Generator().manual_seed(0))
    return nn.Sequential(nn.Flatten(), linear)
"""


def synthetic_split(name: str, split: str, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    n = 60 if split == "train" else 40
    generator = torch.Generator().manual_seed(n)
    return torch.randint(0, 256, (n, 1, 28, 28), generator=generator, dtype=torch.uint8), torch.arange(n) % 10


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "safety_nets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(controversial.data, "load_uint8", synthetic_split)
    return folder


def options(tmp_path: Path, **values) -> ImportOptions:
    defaults = {
        "name": "mine",
        "dataset": "mnist",
        "source": "python:safety_nets:conv",
        "weights": "random",
        "input_size": [1, 28, 28],
        "mean": [0],
        "std": [1],
        "models_dir": str(tmp_path / "models"),
        "device": "cpu",
    }
    return ImportOptions(**{**defaults, **values})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_bundled_name_is_refused_before_anything_is_written(tmp_path, user_code):
    bundled = ROOT / "models" / "mnist" / "vgg.pt"
    before = digest(bundled)
    with pytest.raises(UserError, match="name=vgg is a bundled model.*never replaces"):
        import_model(options(tmp_path, name="vgg", models_dir=str(ROOT / "models")))
    with pytest.raises(UserError, match="name=vgg is a bundled model"):
        import_model(options(tmp_path, name="vgg", overwrite=True))  # not even when asked
    assert digest(bundled) == before and not (tmp_path / "models").exists()


def test_the_repository_models_folder_is_refused(tmp_path, user_code):
    with pytest.raises(UserError, match="is the repository's models/"):
        import_model(options(tmp_path, name="brand_new", models_dir=str(ROOT / "models")))
    assert not (ROOT / "models" / "mnist" / "brand_new.pt").exists()


@pytest.mark.slow
def test_an_imported_model_is_replaced_only_with_overwrite(tmp_path, user_code):
    path = import_model(options(tmp_path))
    first = digest(path)
    with pytest.raises(UserError, match="exists already.*overwrite=true"):
        import_model(options(tmp_path, calibration_seed=1))
    assert digest(path) == first
    import_model(options(tmp_path, calibration_seed=1, overwrite=True))
    assert digest(path) != first  # another random initialisation, as asked


@pytest.mark.slow
def test_by_default_the_model_goes_to_the_user_folder_every_command_finds(tmp_path, user_code, monkeypatch):
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data_home"))
    settings = options(tmp_path)
    settings = ImportOptions(
        **{
            **settings.model_dump(),
            "models_dir": ImportOptions.model_fields["models_dir"].get_default(call_default_factory=True),
        }
    )
    path = import_model(settings)
    assert path == tmp_path / "data_home" / "controversial" / "models" / "mnist" / "mine.pt"
    assert user_models_dirs() == [tmp_path / "data_home" / "controversial" / "models"]
    assert register_model_options()["mine"] == "mnist"  # registered without an environment variable


def test_the_command_leaves_the_repository_untouched(tmp_path, user_code, monkeypatch, capsys):
    """The whole command with its defaults (model card included): no tracked file of the repository changes."""
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data_home"))
    monkeypatch.chdir(tmp_path)
    card = digest(ROOT / "models" / "README.md")
    args = ["name=walk_cnn", "dataset=mnist", "source=python:safety_nets:conv", "weights=random"]
    args += ["input_size=[1,28,28]", "mean=[0]", "std=[1]", "device=cpu", f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", ["import_model.py", *args])
    runpy.run_path(str(ROOT / "import_model.py"))["main"]()
    printed = capsys.readouterr().out
    assert digest(ROOT / "models" / "README.md") == card
    assert (tmp_path / "data_home" / "controversial" / "models" / "README.md").is_file()
    assert MODELS_DIR_ENV not in printed and "python synthesize.py model_a=walk_cnn" in printed
    status = subprocess.run(["git", "status", "--porcelain", "--", "models"], cwd=ROOT, capture_output=True, text=True)
    assert status.stdout == ""


def test_a_wrong_input_size_names_the_dimension(tmp_path, user_code):
    with pytest.raises(UserError, match=r"input_size=\[3, 28, 28\].*channels disagree: input_size gives 3 .* takes 1"):
        import_model(options(tmp_path, input_size=[3, 28, 28], mean=[0, 0, 0], std=[1, 1, 1]))
    with pytest.raises(UserError, match=r"C\*H\*W = 1\*64\*64 = 4096 values but the first layer .* takes 1024"):
        import_model(options(tmp_path, source="python:safety_nets:mlp", input_size=[1, 64, 64]))
    assert not (tmp_path / "models").exists()


def test_a_useless_model_is_imported_with_warnings_that_give_the_numbers(tmp_path, user_code, caplog):
    path = import_model(options(tmp_path, source="python:safety_nets:noise", weights=None))
    info, _ = read_checkpoint(path)
    warnings = info.metrics["warnings"]
    assert any(w.startswith("test accuracy") and "is at chance for 10 classes (10.00% +-" in w for w in warnings)
    assert any("calibration slope" in w and "nearly constant" in w for w in warnings), warnings
    assert "at chance" in caplog.text


def test_quality_and_upsampling_warnings():
    worse = quality_warnings(0.9, 1000, 10, 1.2, (3.54, 4.90))
    assert worse == [
        "the calibration makes the test NLL worse (3.54 -> 4.9): try another calibration= or more calibration_images"
    ]
    assert quality_warnings(0.0974, 10000, 10, 8e-7, (2.0, 1.9))[0].startswith("test accuracy 9.74% is at chance")
    assert quality_warnings(0.98, 10000, 10, 1.0, (0.5, 0.3)) == []
    mnist = dataset_info("mnist")
    message = upsampling_warning([3, 224, 224], mnist, "input_size, mean, std from timm's pretrained config of x")
    assert message is not None and "8.0x per side" in message and "input_size=[3, 28, 28]" in message
    assert upsampling_warning([1, 32, 32], mnist, "given") is None


def test_the_missing_preprocessing_example_is_the_datasets_own():
    message = missing_preprocessing_message("python:m:f", ["mean", "std"], dataset_info("mnist"))
    assert "input_size=[1, 28, 28] mean=[0.1307] std=[0.3081]" in message and "0.4914" not in message
    assert "mean=[0] std=[1] if it takes images in [0, 1]" in message
    cifar = missing_preprocessing_message("python:m:f", ["mean"], dataset_info("cifar10"))
    assert "mean=[0.4914,0.4822,0.4465]" in cifar and "mean=[0,0,0] std=[1,1,1]" in cifar


def test_random_weights_are_a_seeded_dry_run(tmp_path, user_code):
    first = import_model(options(tmp_path, name="dry_a"))
    second = import_model(options(tmp_path, name="dry_b"))
    info, state = read_checkpoint(first)
    _, state_b = read_checkpoint(second)
    assert info.metrics["weights"] == RANDOM_NOTE and "weights_sha256" not in info.metrics
    assert all(torch.equal(state[k], state_b[k]) for k in state)
    assert "warnings" not in info.metrics or not any("at chance" in w for w in info.metrics["warnings"])
