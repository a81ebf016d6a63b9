"""Predictive coding network (Wen et al. 2018): feedforward convolutions plus feedback predictions, unrolled.

Each layer l holds a representation r_l. Feedback (a transposed convolution) predicts the layer
below from r_l; feedforward (a convolution) carries the prediction error upward. One cycle runs
a top-down pass, where each hidden layer moves toward the prediction from above at its learned
rate b_l, then a bottom-up pass, where each layer adds its learned rate a_l times the feedforward
of the error of its prediction of the layer below. The image itself (layer 0) is never changed.
After the cycles, global average pooling and a linear readout give the logits. Every step is
differentiable, so input gradients flow through all cycles.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from controversial.errors import UserError
from controversial.zoo.archs.common import Normalize
from controversial.zoo.registry import register_arch


class PredictiveCodingNet(nn.Module):
    def __init__(
        self,
        dataset: str = "mnist",
        widths: tuple[int, ...] = (16, 32, 32, 64),
        strides: tuple[int, ...] = (1, 2, 1, 2),
        cycles: int = 4,
    ) -> None:
        super().__init__()
        if len(widths) != len(strides):
            raise UserError(f"widths {widths} and strides {strides} must have the same length")
        if cycles < 0:
            raise UserError(f"cycles must be >= 0, got {cycles}")
        self.cycles = cycles
        self.normalize = Normalize.for_dataset(dataset)
        channels = [1 if dataset == "mnist" else 3, *widths]
        self.feedforward = nn.ModuleList(
            nn.Conv2d(c_in, c_out, 3, stride=s, padding=1) for c_in, c_out, s in zip(channels, channels[1:], strides)
        )
        self.feedback = nn.ModuleList(
            nn.ConvTranspose2d(c_out, c_in, 3, stride=s, padding=1, output_padding=s - 1, bias=False)
            for c_in, c_out, s in zip(channels, channels[1:], strides)
        )
        # Learned per-layer update rates, passed through ReLU so they stay non-negative (initial a = 1, b = 0.5).
        self.feedforward_rate = nn.Parameter(torch.ones(len(widths)))
        self.feedback_rate = nn.Parameter(torch.full((len(widths) - 1,), 0.5))
        self.top_norm = nn.BatchNorm2d(widths[-1])
        self.readout = nn.Linear(widths[-1], 10)

    def representations(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Layer states after the feedforward sweep and ``cycles`` predictive-coding cycles; [0] is the input."""
        states = [self.normalize(images)]
        for conv in self.feedforward:
            states.append(F.relu(conv(states[-1])))
        n_layers = len(self.feedforward)
        for _ in range(self.cycles):
            predictions = {}
            for l in range(n_layers - 1, 0, -1):  # top-down: hidden layer l moves toward the prediction from l + 1
                predictions[l] = self.feedback[l](states[l + 1])
                rate = F.relu(self.feedback_rate[l - 1])
                states[l] = F.relu(rate * predictions[l] + (1 - rate) * states[l])
            predictions[0] = self.feedback[0](states[1])
            for l in range(n_layers):  # bottom-up: layer l + 1 corrects itself by the error of its prediction of l
                # r_l+1 is unchanged since the top-down pass, so its prediction of r_l is reused.
                error = states[l] - predictions[l]
                states[l + 1] = F.relu(states[l + 1] + F.relu(self.feedforward_rate[l]) * self.feedforward[l](error))
        return states

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        top = self.top_norm(self.representations(images)[-1])
        return self.readout(F.relu(top).mean(dim=(2, 3)))


@register_arch("pcn")
def pcn(**kwargs) -> PredictiveCodingNet:
    return PredictiveCodingNet(**kwargs)
