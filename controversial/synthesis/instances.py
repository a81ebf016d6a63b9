"""Synthesis against trained instances: the ensembles a pair is optimised against, and the held-out instances
every stimulus is scored under afterwards.

A stimulus optimised against one checkpoint may exploit that checkpoint's idiosyncrasies; whether it tells
the *models* apart is asked of instances of the same recipe trained from other seeds (``zoo/instances.py``).
``model_a.instances=[0,1]`` optimises against both instances at once (the LSE over every instance's terms,
``objectives.py``) and accepts a stimulus only when every one of them passes the hard-score rule. Whatever
was used, the models' other trained instances are *held out*: each manifest row carries their hard score
(the same rule over all of them, each held-out instance held to its own model's side) and their target
probabilities; the *transfer rate* (``sweep_overview.transfer``) is the share of accepted stimuli that every
held-out instance accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from controversial.config import ModelOptions
from controversial.errors import UserError
from controversial.records.manifest import ManifestRow
from controversial.synthesis.objectives import hard_score
from controversial.zoo.checkpoints import load_checkpoint
from controversial.zoo.instances import find_instances, recorded_seed, select_instances
from controversial.zoo.loading import load_models
from controversial.zoo.protocol import scoring
from controversial.zoo.readout import CalibratedModel


@dataclass(frozen=True)
class PairInstances:
    """The trained instances of a model pair: those synthesis optimises against, and the held-out ones."""

    models: list[CalibratedModel]  # flattened: model A's instances, then model B's
    groups: list[int] | None  # the model (0: A, 1: B) of each; None: one checkpoint each (the paper's procedure)
    seeds: tuple[str, str]  # the seeds synthesis used per model, "0" or "0,1", for the manifest
    heldout: list[CalibratedModel]
    heldout_groups: list[int]
    heldout_labels: list[str]  # "<model>@<seed>"

    def to(self, device: torch.device) -> PairInstances:
        return replace(self, models=[m.to(device) for m in self.models], heldout=[m.to(device) for m in self.heldout])


def resolve_instances(spec: ModelOptions, role: str, held_out: Sequence[int]) -> ModelOptions:
    """``spec`` with ``instances=all`` replaced by the seeds it stands for: every trained instance but the
    ``held_out`` ones, in seed order (None, the checkpoint alone, when that leaves only the checkpoint). A run
    records the seeds, not ``all``, so an instance trained later makes its resume a settings mismatch, never a
    silent change of ensemble."""
    if spec.instances is None:
        return spec
    if spec.instances != "all":
        named = sorted(set(spec.instances) & set(held_out))
        if named:
            raise UserError(f"{role}.instances names seed {named[0]}, which instances_except holds out; drop one")
        return spec
    trained = find_instances(spec.checkpoint)
    seeds = [seed for seed in trained if seed not in held_out]
    if not seeds:
        raise UserError(
            f"{role}.instances=all: model '{spec.name}' has no trained instance outside instances_except="
            f"{list(held_out)} (trained: {', '.join(map(str, trained)) or 'none'})"
        )
    if len(seeds) == 1 and trained[seeds[0]] == Path(spec.checkpoint):
        return spec.model_copy(update={"instances": None})
    return spec.model_copy(update={"instances": seeds})


def _checked(model: CalibratedModel, spec: ModelOptions, path: Path, role: str) -> CalibratedModel:
    if model.dataset != spec.dataset:
        raise UserError(f"{path} holds a {model.dataset} model, but {role}={spec.name} is a {spec.dataset} model")
    return model


def load_pair_instances(
    specs: Sequence[ModelOptions], data_root: str | None, roles: Sequence[str], heldout: bool = True
) -> PairInstances:
    """Load what a pair is synthesized against and, with ``heldout``, each model's other trained instances.

    A model without ``instances`` is its checkpoint alone, loaded exactly as before instances existed.
    """
    models: list[CalibratedModel] = []
    groups: list[int] = []
    seeds: list[str] = []
    held: list[tuple[int, str, Path]] = []
    for group, (spec, role) in enumerate(zip(specs, roles)):
        if spec.instances is None:
            (model,) = load_models([spec], data_root, [role])
            used = {recorded_seed(spec.checkpoint): Path(spec.checkpoint)}
            models.append(model)
        else:
            if not spec.instances:
                raise UserError(f"{role}.instances is empty; name at least one trained seed, e.g. [0, 1]")
            if spec.instances == "all":
                raise ValueError(f"{role}.instances=all must be resolved first (resolve_instances)")
            used = select_instances(spec.name, spec.checkpoint, list(spec.instances))
            models += [_checked(load_checkpoint(p, data_root), spec, p, role) for p in used.values()]
        groups += [group] * len(used)
        seeds.append(",".join(map(str, used)))
        if heldout:
            others = {s: p for s, p in find_instances(spec.checkpoint).items() if s not in used}
            held += [(group, f"{spec.name}@{s}", p) for s, p in others.items()]
    single = all(spec.instances is None for spec in specs)
    return PairInstances(
        models,
        None if single else groups,
        (seeds[0], seeds[1]),
        [_checked(load_checkpoint(p, data_root), specs[g], p, roles[g]) for g, _, p in held],
        [g for g, _, _ in held],
        [label for _, label, _ in held],
    )


@scoring()
def heldout_scores(
    instances: PairInstances, images: torch.Tensor, targets: torch.Tensor
) -> tuple[list[float | None], list[str]]:
    """The held-out hard score of each image (None without held-out instances) and the held-out instances'
    target probabilities as text, ``<model>@<seed>:<p(class_a)>/<p(class_b)>`` joined by ``;``."""
    if not instances.heldout:
        return [None] * len(images), [""] * len(images)
    logits = []
    for model in instances.heldout:
        model.reset_state()
        logits.append(model(images).float())
    hard: list[float | None] = hard_score(logits, targets, instances.heldout_groups).tolist()
    probabilities = torch.stack([torch.sigmoid(l.gather(1, targets)) for l in logits], 1).cpu()
    texts = [
        ";".join(
            f"{label}:{float(p[k, 0]):.4f}/{float(p[k, 1]):.4f}" for k, label in enumerate(instances.heldout_labels)
        )
        for p in probabilities
    ]
    return hard, texts


def with_instances(
    rows: list[ManifestRow], instances: PairInstances, images: torch.Tensor, targets: torch.Tensor, threshold: float
) -> list[ManifestRow]:
    """The rows of a batch with the instance columns filled in: the seeds used, and the held-out scores of the
    8-bit ``images`` (the rows' images, in order) for their ``targets``, accepted at ``threshold``."""
    hard, texts = heldout_scores(instances, images, targets)
    return [
        replace(
            row,
            instances_a=instances.seeds[0],
            instances_b=instances.seeds[1],
            heldout_hard_score=None if failed else h,
            heldout_accepted=None if failed or h is None else h >= threshold,
            heldout_probabilities="" if failed else t,
        )
        for row, h, t in zip(rows, hard, texts)
        for failed in [row.status.startswith("failed")]
    ]
