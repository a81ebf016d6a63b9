"""Checkpoints, model files and run folders from someone else are untrusted input (issue 58, item 1 and the
run-dir half of item 3): loading one runs no code the user did not allow and reads no file outside its folder.

Each test reproduces an attack that worked on 009621f: a recorded ``python:os:system`` ran a shell command on
load, recorded timm/torchvision keyword arguments reached downloads and file reads, and a resumed run read an
image from anywhere. Tiny models only; nothing is downloaded (the libraries' builders are replaced by probes).
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import make_run
from torch import nn

from controversial.config import ModelOptions, load_sidecar
from controversial.errors import UserError
from controversial.records.manifest import read_manifest, write_manifest
from controversial.synthesis.runstate import load_finished_rows
from controversial.zoo.checkpoints import CheckpointInfo, load_checkpoint, save_checkpoint
from controversial.zoo.loading import load_models
from controversial.zoo.readout import Calibration
from controversial.zoo.sources import TRUSTED_MODULES_ENV, call_trusted, trusted_factory

IMPORTED = {"num_classes": 10, "input_size": [1, 28, 28], "mean": [0.0], "std": [1.0], "readout": ""}


def stranger_checkpoint(path: Path, source: str, arch_kwargs: dict[str, Any], name: str = "theirs") -> Path:
    """A checkpoint as someone else could write it: architecture ``imported`` with any recorded source."""
    info = CheckpointInfo(
        name=name,
        arch="imported",
        arch_kwargs={"source": source, "arch_kwargs": arch_kwargs, **IMPORTED},
        dataset="mnist",
        calibration=Calibration(1.0, 0.0, "identity"),
    )
    save_checkpoint(path, nn.Module(), info)  # the weights do not matter: the attack runs while building
    return path


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "PWNED"


@pytest.fixture
def their_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: Path) -> str:
    """A module on the path whose callables would leave ``marker`` behind if called."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "their_nets.py").write_text(
        textwrap.dedent(
            f"""
            from shutil import rmtree  # re-exported: a Python function, but not defined here
            from pathlib import Path
            from torch import nn

            MARK = Path({str(marker)!r})


            class NotAModule:
                def __init__(self, **kwargs):
                    MARK.write_text("constructor ran")


            def not_a_net(**kwargs):
                MARK.write_text("factory ran")
                return "a string"


            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.linear = nn.Linear(784, 10)

                def forward(self, x):
                    return self.linear(x.flatten(1))
            """
        )
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv(TRUSTED_MODULES_ENV, raising=False)
    return "their_nets"


def test_a_checkpoint_recording_os_system_runs_nothing_on_load(tmp_path, marker, monkeypatch):
    monkeypatch.delenv(TRUSTED_MODULES_ENV, raising=False)
    path = stranger_checkpoint(tmp_path / "evil.pt", "python:os:system", {"command": f"touch {marker}"})
    with pytest.raises(UserError) as refused:
        load_checkpoint(path)
    assert not marker.exists()
    text = str(refused.value)  # one paragraph naming the module and exactly how to allow it
    assert "'os'" in text and f"{TRUSTED_MODULES_ENV}=os" in text and "\n" not in text
    monkeypatch.setenv(TRUSTED_MODULES_ENV, "os")  # even allowed, a builtin is no nn.Module class or factory
    with pytest.raises(UserError, match="not a torch.nn.Module class"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_model_file_recording_os_system_runs_nothing_through_load_models(tmp_path, marker, monkeypatch):
    """The same attack through a model file beside its checkpoint (model_a=<it>, evaluate.py models_dir=)."""
    monkeypatch.delenv(TRUSTED_MODULES_ENV, raising=False)
    folder = tmp_path / "models" / "mnist"
    folder.mkdir(parents=True)
    kwargs = {"source": "python:os:system", "arch_kwargs": {"command": f"touch {marker}"}, **IMPORTED}
    stranger_checkpoint(folder / "theirs.pt", "python:os:system", kwargs["arch_kwargs"])
    sidecar = folder / "theirs.yaml"
    options = ModelOptions(name="theirs", dataset="mnist", arch="imported", arch_kwargs=kwargs, checkpoint="theirs.pt")
    sidecar.write_text(options.model_dump_json())  # JSON is YAML
    with pytest.raises(UserError, match="not among the modules you allow"):
        load_models([load_sidecar(sidecar)], None, ["model_a"])
    assert not marker.exists()


def test_a_trusted_module_calls_only_its_own_module_classes_and_functions(their_code, marker, monkeypatch):
    monkeypatch.setenv(TRUSTED_MODULES_ENV, their_code)
    with pytest.raises(UserError, match="defined in 'shutil'"):  # `from shutil import rmtree` inside it
        trusted_factory(f"{their_code}:rmtree", "source=python:their_nets:rmtree")
    with pytest.raises(UserError, match="not a torch.nn.Module class"):  # refused before its constructor runs
        trusted_factory(f"{their_code}:NotAModule", "test")
    assert not marker.exists()
    with pytest.raises(UserError, match="returned a str, not a torch.nn.Module"):  # a factory: checked after
        call_trusted(f"{their_code}:not_a_net", "test", {})
    assert isinstance(call_trusted(f"{their_code}:Net", "test", {}), nn.Module)


def test_trust_is_per_module_or_per_callable(their_code, monkeypatch):
    monkeypatch.setenv(TRUSTED_MODULES_ENV, f"other,{their_code}:Net")
    assert isinstance(call_trusted(f"{their_code}:Net", "test", {}), nn.Module)
    with pytest.raises(UserError, match=f"{TRUSTED_MODULES_ENV}=other,{their_code}:Net,{their_code}"):
        trusted_factory(f"{their_code}:not_a_net", "test")
    monkeypatch.setenv(TRUSTED_MODULES_ENV, "their")  # a prefix of the name is not its package
    with pytest.raises(UserError, match="not among the modules you allow"):
        trusted_factory(f"{their_code}:Net", "test")


@pytest.mark.parametrize(
    "arch_kwargs",
    [
        {"pretrained": True},  # a download
        {"pretrained_cfg_overlay": {"file": "/etc/passwd"}},  # a file read through the pretrained config
        {"checkpoint_path": "/home/someone/private.pt"},  # timm reads it with torch.load
        {"cache_dir": "/tmp/x"},
        {"drop_rate": {"nested": "mapping"}},  # no mappings at all, whatever the key
    ],
)
def test_recorded_timm_kwargs_cannot_reach_downloads_or_files(tmp_path, monkeypatch, arch_kwargs):
    timm = pytest.importorskip("timm")
    calls: list[dict] = []
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: calls.append(kwargs) or nn.Linear(1, 1))
    path = stranger_checkpoint(tmp_path / "evil.pt", "timm:test_resnet", arch_kwargs)
    with pytest.raises(UserError, match="is refused"):
        load_checkpoint(path)
    assert calls == []  # the library was never asked


@pytest.mark.parametrize("arch_kwargs", [{"weights": "DEFAULT"}, {"weights_backbone": "DEFAULT"}, {"pretrained": True}])
def test_recorded_torchvision_kwargs_cannot_reach_downloads(tmp_path, monkeypatch, arch_kwargs):
    torchvision = pytest.importorskip("torchvision")
    calls: list[dict] = []
    monkeypatch.setattr(torchvision.models, "get_model", lambda *a, **kwargs: calls.append(kwargs) or nn.Linear(1, 1))
    path = stranger_checkpoint(tmp_path / "evil.pt", "torchvision:resnet18", arch_kwargs)
    with pytest.raises(UserError, match="is refused"):
        load_checkpoint(path)
    assert calls == []


def test_plain_timm_kwargs_still_work():
    pytest.importorskip("timm")
    from controversial.zoo.sources import build_network

    net = build_network("timm:test_resnet", 10, {"drop_rate": 0.1, "drop_path_rate": 0.05})
    assert isinstance(net, nn.Module)


def test_a_pickled_object_in_a_checkpoint_is_not_unpickled(tmp_path, marker):
    """Regression guard (already held on 009621f): ``weights_only=True`` refuses a pickled callable."""

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    path = tmp_path / "pickled.pt"
    torch.save({"format_version": 1, "name": Evil()}, path)
    with pytest.raises(Exception, match="Weights only load failed|Unsupported global"):
        load_checkpoint(path)
    assert not marker.exists()


def test_a_checkpoint_name_that_is_a_path_is_refused(tmp_path):
    """The name becomes part of output file names (evaluate's model decisions)."""
    path = stranger_checkpoint(tmp_path / "evil.pt", "timm:test_resnet", {}, name="../../../ESCAPED")
    with pytest.raises(UserError, match="checkpoint name"):
        load_checkpoint(path)


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink"])
def test_resuming_a_run_reads_no_image_outside_it(tmp_path, how):
    run = tmp_path / "run"
    make_run(run, "abs", "vgg", np.random.default_rng(0))
    private = tmp_path / "private"
    private.mkdir()
    rows = read_manifest(run / "manifest.csv")
    (private / "photo.png").write_bytes((run / rows[0].image_file).read_bytes())
    if how == "symlink":
        (run / "photo.png").symlink_to(private / "photo.png")
    image = {"absolute": str(private / "photo.png"), "dotdot": "../private/photo.png", "symlink": "photo.png"}[how]
    write_manifest(run / "manifest.csv", [replace(rows[0], image_file=image), *rows[1:]])
    with pytest.raises(UserError, match="leads outside"):
        load_finished_rows(run, "abs", "vgg")


@pytest.mark.parametrize("checkpoint", ["/home/someone/other.pt", "../../elsewhere/other.pt"])
def test_a_model_file_names_no_checkpoint_outside_its_folder(tmp_path, checkpoint):
    folder = tmp_path / "models" / "mnist"
    folder.mkdir(parents=True)
    sidecar = folder / "theirs.yaml"
    sidecar.write_text(f"name: theirs\ndataset: mnist\narch: tiny_mlp\ncheckpoint: {checkpoint}\n")
    with pytest.raises(UserError, match="checkpoint.*leads outside"):
        load_sidecar(sidecar)


def test_a_model_file_resolves_no_interpolation(tmp_path, monkeypatch):
    """OmegaConf would resolve ``${oc.env:...}``: a model file could copy a secret into its description."""
    monkeypatch.setenv("A_SECRET", "hunter2")
    folder = tmp_path / "models" / "mnist"
    folder.mkdir(parents=True)
    sidecar = folder / "theirs.yaml"
    sidecar.write_text("name: theirs\ndataset: mnist\narch: tiny_mlp\ndescription: ${oc.env:A_SECRET}\n")
    assert "hunter2" not in load_sidecar(sidecar).description
