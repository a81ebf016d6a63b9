"""Helpers shared by test modules: tiny stand-in checkpoints, composed configs, input gradients, and tiny
synthetic sweeps and test splits for the study and design tests."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
from hydra import compose, initialize_config_dir

from controversial.api import run_command, settings
from controversial.config import CONF_DIR, register_model_options
from controversial.records.manifest import ManifestRow, write_manifest
from controversial.records.names import stimulus_filename
from controversial.synthesis.stimuli import save_png
from controversial.synthesis.sweeps import register_pair_options
from controversial.tasks import Invocation
from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
from controversial.zoo.readout import Calibration
from controversial.zoo.registry import create_arch

IMAGE_SHAPES = {"mnist": [1, 28, 28], "cifar10": [3, 32, 32]}


def write_tiny_checkpoints(folder: Path, names: Sequence[str], dataset: str) -> Path:
    """Tiny random MLPs saved as ``<folder>/<name>.pt`` under the given model names (seeds 1, 2, ...)."""
    for seed, name in enumerate(names, start=1):
        kwargs = {"image_shape": IMAGE_SHAPES[dataset], "hidden": 16, "seed": seed}
        info = CheckpointInfo(
            name=name,
            arch="tiny_mlp",
            arch_kwargs=kwargs,
            dataset=dataset,
            calibration=Calibration(1.0, -1.0, "identity"),
        )
        save_checkpoint(folder / f"{name}.pt", create_arch("tiny_mlp", **kwargs), info)
    return folder


def tiny_abs_vgg_overrides(folder: Path) -> list[str]:
    """synthesize.py overrides that run model_a=abs model_b=vgg on tiny random MLPs saved under ``folder``."""
    write_tiny_checkpoints(folder, ["abs", "vgg"], "mnist")
    return [
        "model_a=abs",
        "model_b=vgg",
        f"model_a.checkpoint={folder / 'abs.pt'}",
        f"model_b.checkpoint={folder / 'vgg.pt'}",
        "wandb.mode=disabled",
    ]


def compose_synthesize(*overrides: str):
    """The synthesize config with these overrides, Hydra's own section included."""
    from controversial.cli import register_defaults
    from controversial.tasks.synthesize import SynthesizeSettings

    register_defaults("synthesize", SynthesizeSettings)
    register_pair_options(register_model_options())
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("synthesize", overrides=list(overrides), return_hydra_config=True)


def settings_for(name: str, overrides: Sequence[str] = ()) -> Any:
    """A command's validated settings, composed from conf/ with these overrides as its entry point would."""
    return settings(name, overrides)


def run_task(name: str, overrides: Sequence[str], out_dir: Path, command: str = "") -> Any:
    """A command in-process (``controversial.api.run_command``), its records naming ``python <name>.py`` alone
    unless ``command`` is given, so they hold no temporary paths."""
    return run_command(name, overrides, out_dir, command or f"python {name}.py")


def train_in(tmp_path: Path, overrides: Sequence[str]) -> Path:
    """``python train.py`` in-process, with model YAMLs also read from ``tmp_path/conf/model`` and every output
    (checkpoint in float32, resume file) under ``tmp_path``; returns the checkpoint's path."""
    from controversial.cli import register_defaults, validate
    from controversial.tasks import train
    from controversial.tasks.train import TrainCommandSettings

    register_defaults("train", TrainCommandSettings)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *overrides,
                f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                f"models_dir={tmp_path / 'models'}",
                f"resume_file={tmp_path / 'resume.pt'}",
                "update_model_card=false",
                "float16=false",
            ],
            return_hydra_config=True,
        )
    return train.run(validate(TrainCommandSettings, cfg), Invocation(tmp_path, "python train.py"))


def input_gradient(net: torch.nn.Module, images: torch.Tensor, cls: int = 3) -> torch.Tensor:
    """d(logit ``cls``)/d(image), summed over the batch."""
    images = images.clone().requires_grad_(True)
    net(images)[:, cls].sum().backward()
    return images.grad


DIGITS = [str(d) for d in range(10)]
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
REPO = Path(__file__).resolve().parents[1]
WEB_SOURCE = REPO / "human_study" / "src"


def make_run(
    run_dir: Path,
    model_a: str,
    model_b: str,
    rng: np.random.Generator,
    seeds: int = 1,
    drop: set[tuple[int, int]] = frozenset(),
    accept_rate: float = 1.0,
    dataset: str = "mnist",
) -> list[ManifestRow]:
    """A synthesize-style run dir: every ordered class pair x seed, random PNGs and scores."""
    names = DIGITS if dataset == "mnist" else list(CIFAR_CLASSES)
    shape = (1, 28, 28) if dataset == "mnist" else (3, 32, 32)
    rows = []
    for (a, b), seed in itertools.product(itertools.permutations(range(10), 2), range(seeds)):
        if (a, b) in drop:
            continue
        name = stimulus_filename(model_a, names[a], model_b, names[b], seed)
        save_png(run_dir / name, rng.random(shape))
        score = float(rng.uniform(0.75, 1.0))
        accepted = bool(rng.random() < accept_rate)
        rows.append(
            ManifestRow(
                dataset=dataset,
                model_a=model_a,
                model_b=model_b,
                class_a=a,
                class_b=b,
                class_a_name=names[a],
                class_b_name=names[b],
                seed=seed,
                source="synthetic",
                init="noise",
                steps=100,
                converged=True,
                hard_score=score if accepted else 0.5,
                smooth_score=1.0,
                p_model_a_class_a=0.9,
                p_model_a_class_b=0.1,
                p_model_b_class_a=0.1,
                p_model_b_class_b=0.9,
                accepted=accepted,
                status="accepted" if accepted else "below_threshold",
                image_file=name,
                wall_time_s=0.1,
            )
        )
    write_manifest(run_dir / "manifest.csv", rows)
    return rows


def make_sweep(root: Path, pairs=(("abs", "vgg"), ("kde", "vgg")), seed: int = 0, seeds: int = 1) -> Path:
    """A sweep folder with one run per model pair, ``seeds`` attempts per cell."""
    rng = np.random.default_rng(seed)
    for model_a, model_b in pairs:
        make_run(root / f"{model_a}_vs_{model_b}", model_a, model_b, rng, seeds=seeds)
    return root


def fake_mnist_test(dataset: str, n_per_class: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Stand-in for a test split: random uint8 (N,C,H,W) images of the dataset's shape, labels cycling 0..9."""
    shape = {"mnist": (1, 28, 28), "cifar10": (3, 32, 32)}[dataset]
    rng = np.random.default_rng(1)
    labels = np.tile(np.arange(10), n_per_class)
    return rng.integers(0, 256, size=(len(labels), *shape), dtype=np.uint8), labels


# analyze.py on a small simulated study: every part runs, in seconds
ANALYZE_SMALL = [
    "bootstrap.n_resamples=300",
    "bootstrap.subset_resamples=100",
    "bootstrap.other_subset_resamples=50",
    "error_consistency.n_resamples=30",
    "error_consistency.null_band_grid=20",
    "simulate.n_participants=6",
    "simulate.n_models=4",
    "simulate.stimuli_per_pair=10",
    "simulate.natural_per_class=2",
    "simulate.true_model=sim2",
]


def run_analyze(out_dir: Path, overrides: Sequence[str]) -> Any:
    """``python analyze.py`` in-process, writing into ``out_dir``."""
    return run_task("analyze", overrides, out_dir)


def softmax_score(logits: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Eq. 1 of the paper, for softmax readouts: ``min_i p_i(t_i)`` (a reference score and a toy objective)."""
    probabilities = [torch.softmax(l, 1).gather(1, targets[:, i : i + 1]).squeeze(1) for i, l in enumerate(logits)]
    return torch.stack(probabilities, 1).min(1).values


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def study_server(bundle: Path, run_dir: Path, database: Path, completion_code: str, admin_token: str) -> Iterator[str]:
    """``serve_study.py`` in a child process on a free loopback port; yields its base URL once it answers
    /api/health (its output goes to ``run_dir/server.log``), and stops it afterwards."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path, port = run_dir / "server.log", free_port()
    command = [
        sys.executable,
        "serve_study.py",
        f"study_dir={bundle}",
        f"completion_code={completion_code}",
        f"port={port}",
        f"database_url=sqlite:///{database}",
        f"hydra.run.dir={run_dir / 'hydra'}",
    ]
    with log_path.open("w") as log:
        env = {**os.environ, "STUDY_ADMIN_TOKEN": admin_token}
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180  # start-up imports take a minute on a starved shared CPU
        try:
            while True:
                assert process.poll() is None, f"server exited: {log_path.read_text()}"
                try:
                    if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the study server did not start"
                time.sleep(0.2)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=10)


def interrupt_synthesis(monkeypatch, at_step: int, attempt: int | None = None) -> None:
    """Ctrl-C as the engine reports step ``at_step`` of attempt ``attempt`` of ``synthesize.py`` (None: of
    whichever attempt first gets there), through the task's progress callbacks."""
    import controversial.tasks.synthesize as synthesize_task

    callbacks = synthesize_task._callbacks

    def interrupting(bar, tracker, this_attempt, offset):
        on_step, on_scores = callbacks(bar, tracker, this_attempt, offset)

        def step(n: int, active: int) -> None:
            if n == at_step and attempt in (None, this_attempt):
                raise KeyboardInterrupt
            on_step(n, active)

        return step, on_scores

    monkeypatch.setattr(synthesize_task, "_callbacks", interrupting)


def slice_accuracy(model: Any, test_slice: tuple[Any, Any]) -> float:
    """Top-1 accuracy of ``model`` on a ``(images, labels)`` slice of the test set."""
    images, labels = test_slice
    with torch.no_grad():
        return float((model(images).argmax(1) == labels).float().mean())


def check_bundled_instance(path: Path, floors: dict[str, float], test_slice: tuple[Any, Any]) -> None:
    """Another trained seed of a bundled recipe (``<dataset>/<name>/seed<K>.pt``) is found by the zoo's own lookup
    under the seed its name says, and reaches the bundled instance's accuracy floor: an instance that trained
    badly would make held-out transfer look worse than the model deserves."""
    from controversial.zoo.checkpoints import load_checkpoint
    from controversial.zoo.instances import INSTANCE_PATTERN, select_instances

    match = INSTANCE_PATTERN.fullmatch(path.name)
    assert match, f"{path}: an instance file is named seed<K>.pt"
    name, seed = path.parent.name, int(match.group(1))
    # the lookup refuses a file whose recorded seed is not the one its name says
    assert select_instances(name, path.parent.parent / f"{name}.pt", [seed]) == {seed: path}
    measured = slice_accuracy(load_checkpoint(path), test_slice)
    assert measured >= floors[name], f"{path.parent.name}/{path.name}: accuracy {measured:.3f}"
