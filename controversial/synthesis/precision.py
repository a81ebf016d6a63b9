"""Which models run their synthesis steps in bfloat16, and how: ``synthesis.precision``.

Under bfloat16 autocast every convolution and linear layer casts its float32 weight to bfloat16 on every
call: the weights are frozen during synthesis, so autocast's cast cache (leaf tensors that require grad only)
never holds them. At the small live batches that dominate a pair's tail (the last stubborn cells), those casts
were an eighth of a step. :func:`low_precision_weights` casts them once per synthesis batch instead, and
:func:`model_logits` calls the model with those copies in place (``torch.func.functional_call``): the same
rounding autocast applies, so the logits and gradients are bit-identical to autocast's (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.func import functional_call

from controversial.errors import UserError
from controversial.zoo.inference import SecondOrderConv2d
from controversial.zoo.protocol import SynthesisModel

PRECISIONS = ("fp32", "bf16", "auto")

# Layers whose forward uses their weight and bias only through an op autocast runs in bfloat16, so a
# bfloat16 copy is exactly what autocast would have made. Exact types: a subclass may read its weight
# elsewhere (weight standardisation, spectral norm), where autocast would keep float32.
_AUTOCAST_LOW_PRECISION_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
    SecondOrderConv2d,
)

LowPrecisionWeights = dict[str, torch.Tensor]


def bfloat16_native(device: torch.device) -> bool:
    """Whether ``device`` has bfloat16 arithmetic in hardware (a GPU that supports it, a CPU with
    AVX-512 BF16 or AMX); elsewhere oneDNN emulates it, slower than float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def bfloat16_models(models: Sequence[SynthesisModel], precision: str, device: torch.device) -> list[bool]:
    """Per model, whether its synthesis steps run under bfloat16 autocast: ``precision`` asks for it
    (``auto``: where the device has it natively) and the model's family does not declare
    ``bfloat16_synthesis = False`` (numerics measured to break)."""
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    wanted = precision == "bf16" or (precision == "auto" and bfloat16_native(device))
    return [wanted and getattr(getattr(model, "net", model), "bfloat16_synthesis", True) for model in models]


def low_precision_weights(model: SynthesisModel) -> LowPrecisionWeights | None:
    """bfloat16 copies of the weights and biases autocast would cast at every call, by parameter name; None for a
    model that is not an ``nn.Module`` (it runs under plain autocast). A tensor shared with a layer of another
    type is left out, as that layer may use it in float32."""
    if not isinstance(model, nn.Module):
        return None
    holders: dict[int, list[nn.Module]] = {}
    for module in model.modules():
        for tensor in module.parameters(recurse=False):
            holders.setdefault(id(tensor), []).append(module)
    copies: LowPrecisionWeights = {}
    for name, tensor in model.named_parameters(remove_duplicate=False):
        if tensor.is_floating_point() and all(
            type(module) in _AUTOCAST_LOW_PRECISION_LAYERS for module in holders[id(tensor)]
        ):
            copies[name] = tensor.detach().to(torch.bfloat16)
    return copies


def model_logits(
    models: Sequence[SynthesisModel],
    images: torch.Tensor,
    bfloat16: Sequence[bool] | None = None,
    weights: Sequence[LowPrecisionWeights | None] | None = None,
) -> list[torch.Tensor]:
    """Every model's logits, in float32; ``bfloat16[i]`` runs model i under bfloat16 autocast (None: none
    does, whatever autocast the caller has on), with ``weights[i]`` (from :func:`low_precision_weights`) in
    place of its float32 weights when given."""
    logits = []
    for index, (model, low) in enumerate(zip(models, bfloat16 or [False] * len(models))):
        copies = weights[index] if weights is not None and low else None
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=low):
            if copies:
                assert isinstance(model, nn.Module)  # low_precision_weights gives None for any other model
                out = functional_call(model, copies, (images,), strict=False, tie_weights=True)
            else:
                out = model(images)
        logits.append(out.float())
    return logits
