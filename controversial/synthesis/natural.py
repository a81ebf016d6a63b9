"""Natural controversial stimuli: test-set images ranked by how strongly two models disagree.

The paper contrasts synthetic stimuli with natural ones; a study can mix both when they share a
manifest format. Every image is scored for every ordered class pair (a, b) with the same hard
controversiality as synthesis (Eq. 2), and the top images per cell are exported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from controversial.errors import UserError
from controversial.synthesis.objectives import hard_score, smooth_score
from controversial.zoo.protocol import SynthesisModel, scoring

log = logging.getLogger(__name__)


def calibrated_logits(
    model: SynthesisModel,
    images: torch.Tensor,
    batch_size: int,
    device: torch.device,
    on_batch: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """(N, K) calibrated logits of uint8 or [0, 1] images, on the CPU.

    Under ``scoring()``: some models take gradients inside their forward pass (see ``zoo/protocol.py``).
    """
    out = []
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size].to(device)
        batch = batch.float() / 255 if batch.dtype == torch.uint8 else batch.float()
        model.reset_state()
        with scoring():
            out.append(model(batch).cpu())
        if on_batch is not None:
            on_batch(len(batch))
    return torch.cat(out)


def hard_score_table(logits_a: torch.Tensor, logits_b: torch.Tensor, cells: list[tuple[int, int]]) -> torch.Tensor:
    """(N, cells) hard score of every image for every ordered class pair, without materialising N x cells targets."""
    index_a = torch.tensor([a for a, _ in cells])
    index_b = torch.tensor([b for _, b in cells])
    terms = torch.stack(
        [
            torch.sigmoid(logits_a[:, index_a]),
            torch.sigmoid(-logits_a[:, index_b]),
            torch.sigmoid(logits_b[:, index_b]),
            torch.sigmoid(-logits_b[:, index_a]),
        ]
    )
    return terms.amin(0)


@dataclass(frozen=True)
class NaturalPick:
    """One exported image: the k-th most controversial test image (``rank`` k) of a cell."""

    class_a: int
    class_b: int
    rank: int
    index: int
    hard: float
    smooth: float
    p_a: tuple[float, float]  # model A's p(class a), p(class b)
    p_b: tuple[float, float]  # model B's p(class a), p(class b)


def top_natural(
    logits_a: torch.Tensor, logits_b: torch.Tensor, cells: list[tuple[int, int]], top_k: int, sharpness: float
) -> list[NaturalPick]:
    """The ``top_k`` highest-scoring images of every cell; ties go to the lower test index."""
    if top_k < 1:
        raise UserError(f"top_k must be at least 1, got {top_k}")
    table = hard_score_table(logits_a, logits_b, cells)
    k = min(top_k, len(table))
    picks = []
    for column, (a, b) in enumerate(cells):
        order = torch.argsort(-table[:, column], stable=True)[:k]
        targets = torch.tensor([[a, b]]).expand(k, 2)
        logits = [logits_a[order], logits_b[order]]
        hard = hard_score(logits, targets)
        smooth = smooth_score(logits, targets, sharpness)
        pa, pb = torch.sigmoid(logits_a[order]), torch.sigmoid(logits_b[order])
        for rank, index in enumerate(order.tolist()):
            picks.append(
                NaturalPick(
                    a,
                    b,
                    rank,
                    index,
                    float(hard[rank]),
                    float(smooth[rank]),
                    (float(pa[rank, a]), float(pa[rank, b])),
                    (float(pb[rank, a]), float(pb[rank, b])),
                )
            )
    return picks
