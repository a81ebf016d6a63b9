"""A model's trained instances: the same recipe trained from other seeds.

A model name is a recipe (conf/model/<name>.yaml), and its bundled checkpoint ``<dataset>/<name>.pt`` is one
trained instance of it: the one trained with the recipe's own ``train.seed`` (0 for every bundled model).
``python train.py model=<name> seed=K`` trains another instance and writes it to
``<dataset>/<name>/seed<K>.pt`` beside it, so the bundled file, and every result made with it, stays as it was.
An instance is named by its seed everywhere (``model_a.instances=[0,1]``, the manifest's held-out columns);
the seed is also recorded inside each file (``train_config.seed``), and that record is what is trusted.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from controversial.errors import UserError
from controversial.zoo.checkpoints import load_checkpoint
from controversial.zoo.readout import IDENTITY, CalibratedModel

INSTANCE_PATTERN = re.compile(r"seed(\d+)\.pt")


def instance_dir(checkpoint: str | Path) -> Path:
    """The folder of a model's other instances: ``<dataset>/<name>/`` beside ``<dataset>/<name>.pt``."""
    path = Path(checkpoint)
    return path.parent / path.stem


def instance_path(checkpoint: str | Path, seed: int) -> Path:
    """Where ``train.py model=<name> seed=<seed>`` writes the instance of seed ``seed`` (not the bundled one)."""
    return instance_dir(checkpoint) / f"seed{seed}.pt"


def recorded_seed(path: str | Path) -> int:
    """The training seed a checkpoint records (0 for a file that records none, such as an imported model)."""
    payload = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    return int(payload.get("train_config", {}).get("seed", 0))


def find_instances(checkpoint: str | Path) -> dict[int, Path]:
    """Every trained instance of the model whose bundled checkpoint is ``checkpoint``, by seed, in seed order.

    The bundled file counts under the seed it records; a file in the instance folder whose recorded seed differs
    from its name is refused, so a renamed file cannot pass as another instance.
    """
    primary = Path(checkpoint)
    found: dict[int, Path] = {}
    if primary.is_file():
        found[recorded_seed(primary)] = primary
    folder = instance_dir(primary)
    for path in sorted(folder.glob("seed*.pt")) if folder.is_dir() else []:
        match = INSTANCE_PATTERN.fullmatch(path.name)
        if match is None:
            continue
        seed = int(match.group(1))
        if recorded_seed(path) != seed:
            raise UserError(f"{path}: named for seed {seed} but trained with seed {recorded_seed(path)}; rename it")
        if seed in found:
            raise UserError(f"{path}: seed {seed} is already the bundled instance {found[seed]}; remove one")
        found[seed] = path
    return dict(sorted(found.items()))


def select_instances(name: str, checkpoint: str | Path, seeds: list[int]) -> dict[int, Path]:
    """The checkpoint of each named instance; a seed that was never trained is an error listing the trained ones."""
    found = find_instances(checkpoint)
    missing = [seed for seed in seeds if seed not in found]
    if missing:
        raise UserError(
            f"model '{name}' has no trained instance of seed {', '.join(map(str, missing))}; trained: "
            f"{', '.join(map(str, found)) or 'none'} (train one with `python train.py model={name} seed={missing[0]}`)"
        )
    if len(set(seeds)) != len(seeds):
        raise UserError(f"model '{name}': instances {seeds} name a seed twice")
    return {seed: found[seed] for seed in seeds}


class InstanceMean(CalibratedModel):
    """A model scored as the mean of its trained instances: its probabilities are the mean of theirs.

    (The calibrated logit it returns is that mean's logit, so ``probabilities`` and everything built on it
    see the mean.) For analysis only; synthesis against instances keeps them apart (``synthesis/instances.py``).
    """

    def __init__(self, instances: list[CalibratedModel], name: str) -> None:
        first = instances[0]
        members = torch.nn.ModuleList(instances)
        super().__init__(members, IDENTITY, name, first.dataset, first.class_names)
        self.members = members
        accuracies = [m.test_accuracy for m in instances]
        self.test_accuracy = min(accuracies) if None not in accuracies else None  # type: ignore[type-var]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        mean = torch.stack([torch.sigmoid(m(images)) for m in self.members]).mean(0)
        return torch.logit(mean.clamp(1e-7, 1 - 1e-7))


def instance_models(checkpoint: str | Path, name: str, data_root: str | None = None) -> list[CalibratedModel]:
    """Every trained instance of a model as ``<name>@<seed>``, then ``<name>`` as their mean (``InstanceMean``)."""
    instances = []
    for seed, path in find_instances(checkpoint).items():
        model = load_checkpoint(path, data_root)
        model.name = f"{name}@{seed}"
        instances.append(model)
    return [*instances, InstanceMean(instances, name)]
