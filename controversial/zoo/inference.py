"""Inference-only rewrites of a trained network that keep its function and cut synthesis time.

Synthesis runs every model forward and backward to the input thousands of times with frozen
weights, so work that only matters for training is pure cost there. Folding each eval-mode batch
norm into the convolution before it removes two elementwise passes per layer forward and backward
and changes logits by float rounding only. Plain convolution stacks also run faster with
channels-last activations on a CPU (oneDNN's native layout); capsule networks, whose routing
reshapes the activations, run slower, so each architecture opts in. A model that differentiates
its own input gradient (JEM's refinement) opts in to convolutions whose second derivative skips the
weight gradient PyTorch computes there whether or not the weights need one. Measured effects:
docs/benchmarks.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from controversial.errors import UserError

if TYPE_CHECKING:
    from controversial.zoo.readout import CalibratedModel

log = logging.getLogger(__name__)

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def fold_batch_norms(module: nn.Module) -> int:
    """Fold every BatchNorm directly after a Conv in an ``nn.Sequential`` into that Conv, in place.

    The module must be in eval mode (running statistics are used). Returns how many were folded.
    """
    if module.training:
        raise UserError("fold_batch_norms needs an eval-mode module: folding freezes the running statistics")
    folded = 0
    for child in module.modules():
        if not isinstance(child, nn.Sequential):
            continue
        for index in range(len(child) - 1):
            conv, norm = child[index], child[index + 1]
            if (
                isinstance(conv, CONVOLUTIONS)
                and isinstance(norm, BATCH_NORMS)
                and norm.track_running_stats
                and norm.num_features == conv.out_channels
            ):
                child[index] = fuse_conv_bn_eval(conv, norm)
                child[index + 1] = nn.Identity()
                folded += 1
    return folded


def use_preferred_memory_format(module: nn.Module) -> bool:
    """Convert ``module`` to channels-last in place if its class sets ``channels_last_inference``.

    Returns whether it was converted.
    """
    if not getattr(module, "channels_last_inference", False):
        return False
    module.to(memory_format=torch.channels_last)
    return True


class _ConvolutionInputGradient(torch.autograd.Function):
    """A convolution's input gradient, ``conv_transpose(grad_output, weight)``, as a differentiable function of
    ``grad_output``: its backward is the convolution itself.

    Autograd's own second derivative of a convolution (``_convolution_double_backward``) also convolves the
    activations with that gradient to form a weight gradient, and transposes both for it, even when the
    weights are frozen: about a third of a JEM synthesis step. The values are the same kernels' (bit-identical).
    """

    @staticmethod
    def forward(ctx, grad_output, inputs, weight, stride, padding, dilation, groups):
        ctx.save_for_backward(weight)
        ctx.hyper = (stride, padding, dilation, groups)
        mask = [True, False, False]
        return torch.ops.aten.convolution_backward(
            grad_output, inputs, weight, None, stride, padding, dilation, False, [0] * len(stride), groups, mask
        )[0]

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return F.conv2d(grad.to(weight.dtype), weight, None, *ctx.hyper), None, None, None, None, None, None


class _Convolution(torch.autograd.Function):
    """``F.conv2d`` whose backward to the input is `_ConvolutionInputGradient` (frozen weights: no weight
    gradient). Under autocast it runs in the autocast dtype, as ``F.conv2d`` does there."""

    @staticmethod
    def forward(ctx, inputs, weight, bias, stride, padding, dilation, groups):
        device = inputs.device.type
        if torch.is_autocast_enabled(device):  # cast as autocast would, then convolve without it
            dtype = torch.get_autocast_dtype(device)
            inputs_cast, weight_cast = inputs.to(dtype), weight.to(dtype)
            with torch.autocast(device, enabled=False):
                bias_cast = None if bias is None else bias.to(dtype)
                outputs = F.conv2d(inputs_cast, weight_cast, bias_cast, stride, padding, dilation, groups)
        else:
            inputs_cast, weight_cast = inputs, weight
            outputs = F.conv2d(inputs, weight, bias, stride, padding, dilation, groups)
        ctx.save_for_backward(inputs_cast, weight_cast)
        ctx.hyper = (stride, padding, dilation, groups)
        ctx.input_dtype = inputs.dtype
        return outputs

    @staticmethod
    def backward(ctx, grad):
        inputs, weight = ctx.saved_tensors
        grad_input = _ConvolutionInputGradient.apply(grad.to(weight.dtype), inputs, weight, *ctx.hyper)
        return grad_input.to(ctx.input_dtype), None, None, None, None, None, None


class SecondOrderConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` with frozen weights whose input gradient is cheap to differentiate again."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return _Convolution.apply(inputs, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _BatchNormInputGradient(torch.autograd.Function):
    """An eval-mode batch norm's input gradient (aten's kernel) as a function of the output gradient; its backward
    scales by ``weight / sqrt(running_var + eps)`` as autograd's does, without the statistics terms autograd's
    generic second derivative also computes (bit-identical)."""

    @staticmethod
    def forward(ctx, grad_output, inputs, weight, mean, var, eps):
        ctx.save_for_backward(weight, var)
        ctx.eps = eps
        mask = [True, False, False]
        return torch.ops.aten.native_batch_norm_backward(
            grad_output, inputs, weight, mean, var, None, None, False, eps, mask
        )[0]

    @staticmethod
    def backward(ctx, grad):
        weight, var = ctx.saved_tensors
        shape = (1, -1) + (1,) * (grad.dim() - 2)
        scaled = grad * (var + ctx.eps).pow(-0.5).view(shape) * weight.view(shape)
        return scaled, None, None, None, None, None


class _BatchNorm(torch.autograd.Function):
    """``F.batch_norm`` in eval mode whose backward to the input is `_BatchNormInputGradient`."""

    @staticmethod
    def forward(ctx, inputs, weight, bias, mean, var, eps):
        ctx.save_for_backward(inputs, weight, mean, var)
        ctx.eps = eps
        return F.batch_norm(inputs, mean, var, weight, bias, False, 0.0, eps)

    @staticmethod
    def backward(ctx, grad):
        inputs, weight, mean, var = ctx.saved_tensors
        return _BatchNormInputGradient.apply(grad, inputs, weight, mean, var, ctx.eps), None, None, None, None, None


class SecondOrderBatchNorm2d(nn.BatchNorm2d):
    """An eval-mode, affine ``nn.BatchNorm2d`` with frozen statistics whose input gradient is cheap to
    differentiate again (one not folded into a convolution: a pre-activation norm)."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return _BatchNorm.apply(inputs, self.weight, self.bias, self.running_mean, self.running_var, self.eps)


def use_second_order_inference(module: nn.Module) -> int:
    """Turn every zero-padded ``nn.Conv2d`` of ``module`` into a `SecondOrderConv2d` and every affine
    ``nn.BatchNorm2d`` with running statistics into a `SecondOrderBatchNorm2d` (same parameters), in place, if
    its class sets ``second_order_inference``. Returns how many were turned."""
    if not getattr(module, "second_order_inference", False):
        return 0
    if module.training or any(parameter.requires_grad for parameter in module.parameters()):
        raise UserError("use_second_order_inference needs an eval-mode module with frozen weights")
    turned = 0
    for child in module.modules():
        if type(child) is nn.Conv2d and child.padding_mode == "zeros":
            child.__class__ = SecondOrderConv2d  # the same module and parameters, another forward
            turned += 1
        elif type(child) is nn.BatchNorm2d and child.affine and child.track_running_stats:
            child.__class__ = SecondOrderBatchNorm2d
            turned += 1
    return turned


def compile_networks(models: Sequence[CalibratedModel]) -> None:
    """Wrap each model's network in ``torch.compile(dynamic=True)``, in place (``synthesis.torch_compile``).

    ``dynamic=True`` because the synthesis batch shrinks as cells finish; a fixed-shape compile would
    recompile at every size. The calibration stays outside the compiled graph (two scalars). A network that
    differentiates its own input gradients (``second_order_inference``: JEM) stays eager: a compiled backward
    cannot be differentiated again (torch refuses it with ``create_graph``).
    """
    for model in models:
        if any(getattr(module, "second_order_inference", False) for module in model.net.modules()):
            log.info(
                "%s stays eager under torch_compile: a compiled backward cannot be differentiated again", model.name
            )
            continue
        model.net = cast(nn.Module, torch.compile(model.net, dynamic=True))  # an OptimizedModule
