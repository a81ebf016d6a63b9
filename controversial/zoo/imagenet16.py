"""ImageNet classifiers on the 16 entry-level categories of the model-vs-human benchmark.

The benchmark reads a 1000-class ImageNet model out on 16 categories: a category's probability is the mean of
the softmax probabilities of its fine-grained ImageNet classes (METHODS.md 4b), and the decision is the arg-max
over the 16. The mapping (category -> WordNet IDs) is the benchmark's, stored with its provenance in
``imagenet16_categories.tsv``; the WordNet IDs become output indices through timm's ImageNet class list.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from controversial.datasets import IMAGENET16_CLASSES, imagenet16_categories
from controversial.errors import UserError

__all__ = ["IMAGENET16_CLASSES", "ImageNet16Readout", "imagenet16_indices"]


def imagenet16_indices() -> dict[str, list[int]]:
    """Each category's fine classes as indices into a 1000-class ImageNet model's outputs (ILSVRC-2012 order)."""
    from timm.data import ImageNetInfo

    index = {wnid: k for k, wnid in enumerate(ImageNetInfo().label_names())}
    return {category: [index[wnid] for wnid in wnids] for category, wnids in imagenet16_categories().items()}


class ImageNet16Readout(nn.Module):
    """(N, 1000) logits -> (N, 16) log of the mean softmax probability of each category's fine classes.

    Computed as a log-sum-exp of the log-softmax over each category's classes minus the log of their count,
    so that it stays finite and differentiable where the probabilities underflow (synthesis pushes them there).
    Its arg-max is the benchmark's decision. The outputs are not normalised over the 16 (the fine classes of
    the other 793 ImageNet classes keep their share), as in the benchmark.
    """

    indices: torch.Tensor  # (16, largest group) fine-class indices, short groups padded with their first
    mask: torch.Tensor  # 0 on a category's classes, -inf on the padding
    log_counts: torch.Tensor  # (16,) log of each category's number of fine classes

    def __init__(self) -> None:
        super().__init__()
        groups = list(imagenet16_indices().values())
        width = max(len(group) for group in groups)
        padded = torch.tensor([group + [group[0]] * (width - len(group)) for group in groups])
        mask = torch.tensor([[0.0] * len(group) + [-math.inf] * (width - len(group)) for group in groups])
        self.register_buffer("indices", padded, persistent=False)
        self.register_buffer("mask", mask, persistent=False)
        self.register_buffer("log_counts", torch.tensor([math.log(len(g)) for g in groups]), persistent=False)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.shape[-1] != 1000:
            raise UserError(
                f"the 16-category readout reads the 1000 ImageNet-1k logits, but the model gives {logits.shape[-1]} "
                "outputs; import an ImageNet-1k classifier for imagenet16:<path>, or use folder:<path> otherwise"
            )
        log_p = torch.log_softmax(logits.float(), dim=-1)
        grouped = log_p[:, self.indices] + self.mask  # (N, 16, largest group)
        return torch.logsumexp(grouped, dim=-1) - self.log_counts
