import pytest
import torch
from torch import nn

from controversial.zoo.bundled import load_model
from controversial.zoo.inference import fold_batch_norms, use_preferred_memory_format, use_second_order_inference


def _conv_bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)),
        nn.BatchNorm2d(4),  # not after a convolution: left alone
        nn.Flatten(),
        nn.LazyLinear(3),
    )
    net(torch.rand(2, 1, 8, 8))
    for norm in net.modules():
        if isinstance(norm, nn.BatchNorm2d):  # non-trivial running statistics and affine terms
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
            norm.weight.data.uniform_(0.5, 2)
            norm.bias.data.uniform_(-1, 1)
    return net.eval()


def test_folding_keeps_the_function_and_its_input_gradient():
    net = _conv_bn_net()
    images = torch.rand(5, 1, 8, 8, requires_grad=True)
    expected = net(images)
    (expected_grad,) = torch.autograd.grad(expected.sum(), images)
    assert fold_batch_norms(net) == 2
    assert isinstance(net[1], nn.Identity) and isinstance(net[3][1], nn.Identity)
    assert isinstance(net[4], nn.BatchNorm2d)
    folded = net(images)
    (folded_grad,) = torch.autograd.grad(folded.sum(), images)
    assert torch.allclose(folded, expected, atol=1e-5)
    assert torch.allclose(folded_grad, expected_grad, atol=1e-5)


def test_folding_refuses_a_module_in_training_mode():
    with pytest.raises(ValueError, match="eval-mode"):
        fold_batch_norms(_conv_bn_net().train())


def test_channels_last_is_applied_only_where_an_architecture_opts_in_and_keeps_the_function():
    from controversial.zoo.archs.vgg import VGG

    torch.manual_seed(0)
    vgg = VGG("mnist", widths=(4, 8), fc=16).eval()
    images = torch.rand(3, 1, 28, 28, requires_grad=True)
    expected = vgg(images)
    (expected_grad,) = torch.autograd.grad(expected[:, 2].sum(), images)
    assert use_preferred_memory_format(vgg)
    assert vgg.features[4].weight.is_contiguous(memory_format=torch.channels_last)  # a 4 -> 4 channel conv
    converted = vgg(images)
    (converted_grad,) = torch.autograd.grad(converted[:, 2].sum(), images)
    assert torch.allclose(converted, expected, atol=1e-5)
    assert torch.allclose(converted_grad, expected_grad, atol=1e-5)

    plain = _conv_bn_net()
    assert not use_preferred_memory_format(plain)
    assert not plain[3][0].weight.is_contiguous(memory_format=torch.channels_last)


def _tiny_jem() -> nn.Module:
    """A JEM on a WRN-10-1 with non-trivial batch norms, ready for inference (folded, frozen, channels-last)."""
    from controversial.zoo.archs.jem import JointEnergyModel

    torch.manual_seed(0)
    kwargs = {"dataset": "cifar10", "depth": 10, "widen_factor": 1, "norm": "batch", "stem_stride": 2}
    jem = JointEnergyModel(backbone_kwargs=kwargs, refine_steps=3, refine_step_size=0.05)
    for norm in jem.modules():
        if isinstance(norm, nn.BatchNorm2d):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2)
            norm.weight.data.uniform_(0.5, 2)
            norm.bias.data.uniform_(-0.5, 0.5)
    fold_batch_norms(jem.eval())
    jem.requires_grad_(False)
    use_preferred_memory_format(jem)
    return jem


def _synthesis_gradient(net: nn.Module, images: torch.Tensor, bfloat16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    images = images.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16):
        logits = net(images).float()
    (grad,) = torch.autograd.grad(logits[:, 3].sum() - logits[:, 5].sum(), images)
    return logits.detach(), grad


@pytest.mark.parametrize("bfloat16", [False, True], ids=["float32", "bfloat16"])
def test_second_order_rewrite_keeps_jem_logits_and_synthesis_gradients_bit_for_bit(bfloat16):
    """Synthesis differentiates JEM's refinement, whose steps are input gradients: the rewrite must change
    nothing but the work (autograd's double backward of a convolution also forms a weight gradient)."""
    from controversial.zoo.inference import SecondOrderBatchNorm2d, SecondOrderConv2d

    jem = _tiny_jem()
    images = torch.rand(4, 3, 32, 32)
    expected_logits, expected_grad = _synthesis_gradient(jem, images, bfloat16)
    assert use_second_order_inference(jem) == 13  # 9 convolutions, 4 pre-activation norms (the rest folded)
    assert any(isinstance(m, SecondOrderConv2d) for m in jem.modules())
    assert any(isinstance(m, SecondOrderBatchNorm2d) for m in jem.modules())
    logits, grad = _synthesis_gradient(jem, images, bfloat16)
    assert torch.equal(logits, expected_logits)
    assert torch.equal(grad, expected_grad)
    assert grad.abs().sum() > 0


def test_second_order_rewrite_is_opt_in_and_needs_a_frozen_eval_module():
    plain = _conv_bn_net().requires_grad_(False)
    assert use_second_order_inference(plain) == 0
    assert type(plain[0]) is nn.Conv2d
    jem = _tiny_jem()
    with pytest.raises(ValueError, match="frozen weights"):
        use_second_order_inference(jem.train())
    with pytest.raises(ValueError, match="frozen weights"):
        use_second_order_inference(jem.eval().requires_grad_(True))


def test_bundled_jem_is_loaded_with_the_second_order_rewrite():
    from controversial.zoo.inference import SecondOrderConv2d

    jem = load_model("jem")
    assert any(isinstance(m, SecondOrderConv2d) for m in jem.modules())
    wrn = load_model("wrn")  # first-order only: plain modules
    assert not any(isinstance(m, SecondOrderConv2d) for m in wrn.modules())


def test_torch_compile_leaves_a_second_order_network_eager():
    """synthesis.torch_compile with a JEM pair crashed: a compiled backward cannot be differentiated again."""
    from controversial.zoo.inference import compile_networks
    from controversial.zoo.readout import CalibratedModel, Calibration

    jem = _tiny_jem()
    use_second_order_inference(jem)
    model = CalibratedModel(jem, Calibration(1.0, 0.0, "median"), "tiny_jem", "cifar10", tuple("abcdefghij"))
    compile_networks([model])
    assert model.net is jem
    images = torch.rand(2, 3, 32, 32, requires_grad=True)
    (grad,) = torch.autograd.grad(model(images)[:, 0].sum(), images)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
