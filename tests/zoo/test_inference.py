import pytest
import torch
from torch import nn

from controversial.zoo.inference import fold_batch_norms, use_preferred_memory_format


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
