"""Controversiality scores: pure tensor functions of calibrated logits.

For models ``M_1..M_m`` with target classes ``t_1..t_m``, model ``M_i`` should detect its own target
and none of the others'. The *terms* are the calibrated logits ``l_i(t_i)`` and ``-l_i(t_j)`` for
j != i; with two models they are ``[lA(a), -lA(b), lB(b), -lB(a)]`` (Eq. 2 of Golan et al. 2020).
The objective synthesis maximises is chosen by name from ``OBJECTIVES``; the paper's is ``lse``.

With ``groups`` the models are trained instances of fewer models (an ensemble of seeds each, ``groups[i]``
naming the model that instance i belongs to): every instance contributes its own terms for its model's
target, so the hard score requires every instance to see its target and none of the others'.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from controversial.errors import UserError
from controversial.synthesis.options import OBJECTIVES, SynthesisOptions


def controversy_terms(
    logits: list[torch.Tensor], targets: torch.Tensor, groups: Sequence[int] | None = None
) -> torch.Tensor:
    """Signed calibrated logits whose sigmoids must all be high.

    logits: one (N, K) tensor per model; targets: (N, m) class indices, column i for model i.
    Returns (N, m*m): for every model i, +l_i(t_i) and -l_i(t_j) for each j != i.
    With ``groups`` (one model index per logits tensor), targets has one column per model and each
    instance i gives +l_i(t_groups[i]) and -l_i(t_j) for the other models j: (N, len(logits) * m).
    """
    n_models = len(logits) if groups is None else targets.shape[1]
    owners = range(n_models) if groups is None else groups
    if targets.shape[1] != n_models or len(owners) != len(logits) or not all(0 <= g < n_models for g in owners):
        raise UserError(f"targets has {targets.shape[1]} columns for {n_models} models (instance groups {owners})")
    terms = []
    for i, model_logits in zip(owners, logits):
        for j in range(n_models):
            value = model_logits.gather(1, targets[:, j : j + 1]).squeeze(1)
            terms.append(value if i == j else -value)
    return torch.stack(terms, 1)


def hard_score(logits: list[torch.Tensor], targets: torch.Tensor, groups: Sequence[int] | None = None) -> torch.Tensor:
    """Eq. 2: min over terms of the sigmoid probabilities, in [0, 1]; used to accept stimuli."""
    return torch.sigmoid(controversy_terms(logits, targets, groups)).min(1).values


def smooth_score(
    logits: list[torch.Tensor], targets: torch.Tensor, sharpness: float, groups: Sequence[int] | None = None
) -> torch.Tensor:
    """Eq. 4: ``-(1/a) log sum exp(-a * terms)`` with sharpness ``a`` (the paper's alpha), a smooth minimum of
    the terms; maximised."""
    if sharpness <= 0:
        raise UserError(f"sharpness must be positive, got {sharpness}")
    terms = controversy_terms(logits, targets, groups)
    return -torch.logsumexp(-sharpness * terms, dim=1) / sharpness


def worst_case_probabilities(probabilities: torch.Tensor, groups: Sequence[int] | None) -> torch.Tensor:
    """(N, models, models) from per-instance (N, instances, models) probabilities: per model, the lowest p of
    its own target and the highest p of the other's among its instances (what the hard score rests on)."""
    if groups is None:
        return probabilities
    owner = torch.tensor(list(groups), device=probabilities.device)
    rows = []
    for g in range(probabilities.shape[2]):
        mine = probabilities[:, owner == g]  # (N, instances of g, models)
        rows.append(
            torch.stack(
                [
                    mine[:, :, j].min(1).values if j == g else mine[:, :, j].max(1).values
                    for j in range(probabilities.shape[2])
                ],
                1,
            )
        )
    return torch.stack(rows, 1)


@OBJECTIVES.register("lse")
def lse_objective(
    logits: list[torch.Tensor],
    targets: torch.Tensor,
    options: SynthesisOptions,
    groups: Sequence[int] | None = None,
) -> torch.Tensor:
    """The default objective: the paper's smooth score (Eq. 4) with sharpness ``options.sharpness``.

    For ensembles of instances it is the same smooth minimum over every instance's terms: the soft version of
    the acceptance rule (each instance must pass), where a mean readout would let one confident instance
    carry a doubtful one.
    """
    return smooth_score(logits, targets, options.sharpness, groups)
