"""The CPPN parametrisation (``synthesis.parametrization=cppn``): each image is a small network's picture.

A compositional pattern-producing network (Stanley 2007; Mordvintsev et al., Distill 2018) maps every
pixel's coordinates (x, y, r) through ``cppn_layers`` hidden layers of ``cppn_width`` units with the
composite arctan activation to a colour (sigmoid output); its weights are the parameters, so an image is
made of smooth, global shapes rather than independent pixels. Each image has its own network: the
weights of the batch are one (N, P) tensor (what the engine's per-row optimiser state and compaction
expect), unpacked into per-layer (N, fan_in, fan_out) views and run as batched matrix products.

The parameters are the weights divided by ``WEIGHT_SCALE``: under the default Adam (lr 0.05) a weight
moves by about 0.001 per step. At 0.005 (the tutorial's CPPN learning rate) the sigmoid output of some
cells saturated to a flat image within a few steps on MNIST pairs, where the gradient vanishes.
``from_images`` keeps the hidden layers at one fixed random draw (seed 0) and fits the output layer to the
image's logits by ridge least squares: the closest picture these hidden layers can make, exact for an
image they made.
"""

from __future__ import annotations

import math

import torch

from controversial.synthesis.options import PARAMETRIZATIONS, SynthesisOptions

WEIGHT_SCALE = 0.02
RIDGE = 1e-6  # relative to the features' mean squared norm: regularises a nearly collinear fit only


def _coordinates(height: int, width: int) -> torch.Tensor:
    """(H * W, 3): x, y in [-sqrt 3, sqrt 3] (unit variance) and the radius r."""
    ys = torch.linspace(-math.sqrt(3), math.sqrt(3), height)
    xs = torch.linspace(-math.sqrt(3), math.sqrt(3), width)
    y, x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([x, y, torch.sqrt(x**2 + y**2)], -1).reshape(-1, 3)


def _composite(h: torch.Tensor) -> torch.Tensor:
    """Distill's composite activation: arctan and its square, each scaled to about unit variance."""
    a = torch.atan(h)
    return torch.cat([a / 0.67, a * a / 0.6], -1)


@PARAMETRIZATIONS.register("cppn")
class CPPNParametrization:
    """Per-image coordinate networks; see the module docstring."""

    def __init__(self, shape: tuple[int, int, int], options: SynthesisOptions) -> None:
        self.shape = shape
        channels, height, width = shape
        self._coords = _coordinates(height, width)
        sizes = [3] + [2 * options.cppn_width] * options.cppn_layers
        self._layers = [(fan_in, options.cppn_width) for fan_in in sizes[:-1]] + [(sizes[-1], channels)]

    def _unpack(self, params: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        weights = params * WEIGHT_SCALE
        layers, offset = [], 0
        for fan_in, fan_out in self._layers:
            w = weights[:, offset : offset + fan_in * fan_out].reshape(-1, fan_in, fan_out)
            offset += fan_in * fan_out
            b = weights[:, offset : offset + fan_out].unsqueeze(1)
            offset += fan_out
            layers.append((w, b))
        return layers

    def _hidden(self, layers: list[tuple[torch.Tensor, torch.Tensor]], n: int) -> torch.Tensor:
        """(N, H * W, features) of the last hidden layer."""
        h = self._coords.to(layers[0][0].device).expand(n, -1, -1)
        for w, b in layers[:-1]:
            h = _composite(torch.baddbmm(b, h, w))
        return h

    def to_images(self, params: torch.Tensor) -> torch.Tensor:
        layers = self._unpack(params)
        w, b = layers[-1]
        logits = torch.baddbmm(b, self._hidden(layers, len(params)), w)
        channels, height, width = self.shape
        return torch.sigmoid(logits).transpose(1, 2).reshape(-1, channels, height, width)

    def from_images(self, images: torch.Tensor) -> torch.Tensor:
        n = len(images)
        generator = torch.Generator().manual_seed(0)
        hidden = [
            torch.cat([torch.randn(i * o, generator=generator) / math.sqrt(i), torch.zeros(o)])
            for i, o in self._layers[:-1]
        ]
        flat = torch.cat(hidden).to(images.device, images.dtype) / WEIGHT_SCALE
        one = flat.expand(1, -1)
        n_out = sum(i * o + o for i, o in self._layers[-1:])
        features = self._hidden(self._unpack(torch.cat([one, one.new_zeros(1, n_out)], 1)), 1)[0]
        design = torch.cat([features, features.new_ones(len(features), 1)], 1)  # (H * W, F + 1)
        gram = design.T @ design
        gram += RIDGE * gram.diagonal().mean() * torch.eye(len(gram), device=gram.device, dtype=gram.dtype)
        eps = 1e-3
        x = images.clamp(eps, 1 - eps).flatten(2).transpose(1, 2)  # (N, H * W, C)
        target = torch.log(x) - torch.log1p(-x)
        solution = torch.linalg.solve(gram, design.T @ target)  # (N, F + 1, C)
        out_w, out_b = solution[:, :-1, :], solution[:, -1, :]
        output = torch.cat([out_w.flatten(1), out_b], 1) / WEIGHT_SCALE
        return torch.cat([flat.expand(n, -1), output], 1).clone()
