"""The Experiment 1 model families: tiny-config mechanics by default, bundled checkpoints with --run-data."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import check_bundled_instance, input_gradient, slice_accuracy

from controversial.zoo.archs.capsnet import route, squash
from controversial.zoo.attacks import pgd, project
from controversial.zoo.bundled import MODELS_DIR
from controversial.zoo.registry import create_arch
from controversial.zoo.train_options import TrainOptions
from controversial.zoo.training_methods import capsule_margin_loss, derive_from_checkpoint, non_digit_images

TINY = {
    "capsnet": dict(conv_channels=4, primary_types=2, primary_dim=4, digit_dim=6, decoder_hidden=(8,)),
    "pcn": dict(widths=(4, 6), strides=(2, 2), cycles=4),
    "madry_mnist": dict(widths=(4, 6), fc=8),
}


@pytest.mark.parametrize("arch, kwargs", [*TINY.items(), ("capsnet", {**TINY["capsnet"], "readout": "reconstruction"})])
def test_tiny_arch_logits_andinput_gradient(arch, kwargs):
    torch.manual_seed(0)
    net = create_arch(arch, **kwargs).eval()
    images = torch.rand(3, 1, 28, 28)
    logits = net(images)
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()
    grad = input_gradient(net, images)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_squash_keeps_direction_and_bounds_length():
    vectors = torch.randn(5, 7) * torch.tensor([0.01, 0.1, 1.0, 10.0, 100.0])[:, None]
    out = squash(vectors)
    lengths = out.norm(dim=-1)
    assert torch.all(lengths < 1) and torch.all(lengths[1:] > lengths[:-1])
    assert torch.allclose(F.cosine_similarity(out, vectors, dim=-1), torch.ones(5), atol=1e-5)
    s = vectors.norm(dim=-1)
    assert torch.allclose(lengths, s**2 / (1 + s**2), atol=1e-5)


def test_routing_couples_inputs_to_the_output_they_agree_with():
    # Every input votes the same vector for output 0 and a random one for output 1: agreement
    # concentrates the coupling on output 0, so its capsule grows longer with more iterations.
    torch.manual_seed(0)
    common = torch.randn(1, 1, 1, 4) * 2
    predictions = torch.cat([common.expand(1, 20, 1, 4), torch.randn(1, 20, 1, 4) * 2], dim=2)
    one, three = route(predictions, 1), route(predictions, 3)
    assert one.shape == (1, 2, 4)
    assert three[0, 0].norm() > one[0, 0].norm()
    assert three[0, 0].norm() > three[0, 1].norm()
    with pytest.raises(ValueError, match="at least one iteration"):
        route(predictions, 0)


def test_capsnet_readouts_share_weights_and_reconstruction_is_minus_the_error():
    torch.manual_seed(0)
    length_net = create_arch("capsnet", **TINY["capsnet"]).eval()
    recon_net = create_arch("capsnet", **TINY["capsnet"], readout="reconstruction").eval()
    recon_net.load_state_dict(length_net.state_dict())
    images = torch.rand(2, 1, 28, 28)
    capsules = length_net.capsules(images)
    expected = torch.stack(
        [-((recon_net.reconstruct(capsules, torch.full((2,), k)) - images) ** 2).flatten(1).sum(1) for k in range(10)],
        1,
    )
    assert torch.allclose(recon_net(images), expected, atol=1e-5)
    assert torch.allclose(torch.sigmoid(length_net(images)), capsules.norm(dim=-1).clamp(1e-6, 1 - 1e-6), atol=1e-5)
    with pytest.raises(ValueError, match="unknown capsnet readout"):
        create_arch("capsnet", readout="length2")


def test_margin_loss_is_zero_for_confident_correct_capsules():
    labels = torch.tensor([2, 5])
    perfect = F.one_hot(labels, 10).float() * 0.95 + 0.05
    assert capsule_margin_loss(perfect, labels) == 0
    assert capsule_margin_loss(1 - perfect, labels) > 0


def test_derive_copies_weights_from_a_checkpoint(tmp_path):
    from controversial.zoo.checkpoints import CheckpointInfo, save_checkpoint
    from controversial.zoo.readout import Calibration

    torch.manual_seed(0)
    source = create_arch("capsnet", **TINY["capsnet"]).eval()
    path = tmp_path / "caps.pt"
    save_checkpoint(
        path, source, CheckpointInfo("caps", "capsnet", TINY["capsnet"], "mnist", Calibration(1.0, 0.0, "identity"))
    )
    target = create_arch("capsnet", **TINY["capsnet"], readout="reconstruction")
    derive_from_checkpoint(
        target,
        torch.empty(0),
        torch.empty(0),
        TrainOptions(method="derive", extra={"source": str(path)}),
        lambda m: None,
    )
    assert all(
        torch.equal(a.half().float(), b) for a, b in zip(source.state_dict().values(), target.state_dict().values())
    )
    with pytest.raises(ValueError, match="missing mandatory value: source"):
        derive_from_checkpoint(target, torch.empty(0), torch.empty(0), TrainOptions(method="derive"), lambda m: None)
    with pytest.raises(FileNotFoundError, match="train the source model first"):
        derive_from_checkpoint(
            target,
            torch.empty(0),
            torch.empty(0),
            TrainOptions(method="derive", extra={"source": str(tmp_path / "no.pt")}),
            lambda m: None,
        )


def test_pcn_cycles_change_the_representation_and_rates_get_gradients():
    torch.manual_seed(0)
    net = create_arch("pcn", **TINY["pcn"]).eval()
    images = torch.rand(2, 1, 28, 28)
    feedforward_only = create_arch("pcn", **{**TINY["pcn"], "cycles": 0}).eval()
    feedforward_only.load_state_dict(net.state_dict())
    assert not torch.allclose(net(images), feedforward_only(images))
    net(images).sum().backward()
    assert net.feedforward_rate.grad.abs().sum() > 0 and net.feedback_rate.grad.abs().sum() > 0


@pytest.mark.parametrize("norm, eps", [("linf", 0.3), ("l2", 1.5)])
def test_pgd_stays_in_the_ball_and_the_image_range_and_raises_the_loss(norm, eps):
    torch.manual_seed(0)
    net = create_arch("madry_mnist", **TINY["madry_mnist"]).eval()
    images, labels = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    adversarial = pgd(
        net, images, labels, norm, eps, steps=10, step_size=2.5 * eps / 10, generator=torch.Generator().manual_seed(0)
    )
    delta = (adversarial - images).flatten(1)
    size = delta.abs().amax(1) if norm == "linf" else delta.norm(dim=1)
    assert torch.all(size <= eps + 1e-5)
    assert adversarial.min() >= 0 and adversarial.max() <= 1
    with torch.no_grad():
        assert F.cross_entropy(net(adversarial), labels) > F.cross_entropy(net(images), labels)
    assert all(p.grad is None for p in net.parameters())


def test_project_and_unknown_norm():
    delta = torch.full((1, 1, 2, 2), 2.0)
    assert torch.allclose(project(delta, "l2", 1.0).norm(), torch.tensor(1.0))
    assert project(delta, "linf", 0.5).max() == 0.5
    with pytest.raises(ValueError, match="unknown norm"):
        project(delta, "l1", 1.0)


def test_non_digit_images_are_in_range_and_tiles_are_a_permutation_of_a_digit():
    digits = torch.rand(1, 1, 28, 28)
    images = non_digit_images(6, digits, torch.Generator().manual_seed(0))
    assert images.shape == (6, 1, 28, 28) and images.min() >= 0 and images.max() <= 1
    tiles = lambda x: sorted(x.unfold(0, 7, 7).unfold(1, 7, 7).reshape(16, -1).tolist())  # noqa: E731
    assert tiles(images[2, 0]) == tiles(digits[0, 0]) and not torch.equal(images[2], digits[0])


# --- bundled checkpoints (need MNIST from the data root) ------------------------------------------

# Floors on the first 500 test images, a little under each model's full-test-set accuracy.
CHECKPOINT_FLOORS = {
    "vgg": 0.97,
    "vgg_neg": 0.97,
    "capsnet": 0.97,
    "capsnet_recon": 0.85,
    "pcn": 0.97,
    "madry_linf": 0.95,
    "madry_l2": 0.95,
}


@pytest.fixture(scope="module")
def test_slice():
    from controversial.data import load_uint8

    images, labels = load_uint8("mnist", "test", None, download=False)
    return images[:500].float() / 255, labels[:500]


@pytest.mark.data
@pytest.mark.parametrize("name", sorted(CHECKPOINT_FLOORS))
def test_bundled_checkpoint_accuracy_andinput_gradient(name, test_slice):
    from controversial.zoo.bundled import checkpoint_path, load_model

    if not checkpoint_path(name, "mnist").is_file():
        pytest.fail(f"models/mnist/{name}.pt is missing: python train.py model={name}")
    model = load_model(name, dataset="mnist")
    accuracy = slice_accuracy(model, test_slice)
    assert accuracy >= CHECKPOINT_FLOORS[name], f"{name}: {accuracy:.3f} on the first 500 test images"
    grad = input_gradient(model, test_slice[0][:8])
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


INSTANCE_FILES = sorted(p.relative_to(MODELS_DIR).as_posix() for p in (MODELS_DIR / "mnist").glob("*/seed*.pt"))


@pytest.mark.data
@pytest.mark.parametrize("relative", INSTANCE_FILES)
def test_bundled_instances_reach_their_familys_floor(relative, test_slice):
    check_bundled_instance(MODELS_DIR / relative, CHECKPOINT_FLOORS, test_slice)


def test_robustness_metrics_only_for_adversarial_training():
    from controversial.zoo.attacks import pgd_accuracy
    from controversial.zoo.training import robustness_metrics

    torch.manual_seed(0)
    net = create_arch("madry_mnist", **TINY["madry_mnist"]).eval()
    images, labels = torch.rand(6, 1, 28, 28), torch.randint(0, 10, (6,))
    assert robustness_metrics(net, images, labels, TrainOptions(method="supervised")) == {}
    settings = TrainOptions(
        method="adversarial",
        extra={"norm": "linf", "eps": 0.3, "steps": 1, "step_size": 0.1, "eval_steps": 3, "eval_images": 4},
    )
    metrics = robustness_metrics(net, images, labels, settings)
    assert metrics["pgd_attack"].startswith("linf eps 0.3, 3 steps") and "first 4 test images" in metrics["pgd_attack"]
    with torch.no_grad():
        clean = float((net(images[:4]).argmax(1) == labels[:4]).double().mean())
    assert metrics["clean_accuracy_same_images"] == clean
    # the evaluation attack as configured: 3 steps of the default size 2.5 eps / steps, first 4 images, seed 0
    assert metrics["pgd_accuracy"] == pgd_accuracy(net, images[:4], labels[:4], "linf", 0.3, 3, 0.25, seed=0)


def test_capsule_loss_without_readout_term_is_sabours_and_the_readout_term_is_the_readouts_cross_entropy():
    from controversial.zoo.training_methods import CapsuleExtra, capsule_loss

    torch.manual_seed(0)
    net = create_arch("capsnet", **TINY["capsnet"], readout="reconstruction")
    images, labels = torch.rand(4, 1, 28, 28), torch.tensor([0, 3, 3, 9])
    capsules = net.capsules(images)
    margin = capsule_margin_loss(capsules.norm(dim=-1), labels)
    sse = ((net.reconstruct(capsules, labels) - images) ** 2).flatten(1).sum(1).mean()
    plain, parts = capsule_loss(net, images, labels, CapsuleExtra(reconstruction_weight=0.01))
    assert torch.allclose(plain, margin + 0.01 * sse) and parts["readout"] == 0

    with_readout, parts = capsule_loss(net, images, labels, CapsuleExtra(0.01, readout_weight=2.0, readout_scale=0.1))
    readout = F.cross_entropy(0.1 * net(images), labels)  # the reconstruction readout's own logits, scaled
    assert torch.allclose(with_readout, margin + 0.01 * sse + 2.0 * readout, rtol=1e-5)
    assert parts["readout"] == pytest.approx(readout.item(), rel=1e-5)


def test_the_readout_term_trains_the_decoder_to_reconstruct_badly_from_wrong_capsules():
    """A few steps on fixed images: the readout term widens the true class's lead in the reconstruction readout."""
    from controversial.zoo.training_methods import CapsuleExtra, capsule_loss

    images, labels = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(1)), torch.arange(10)
    gaps = {}
    for weight in (0.0, 1.0):
        torch.manual_seed(0)
        net = create_arch("capsnet", **TINY["capsnet"], readout="reconstruction")
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        for _ in range(25):
            optimizer.zero_grad()
            capsule_loss(net, images, labels, CapsuleExtra(0.01, readout_weight=weight))[0].backward()
            optimizer.step()
        with torch.no_grad():
            logits = net(images)
        true = logits.gather(1, labels.unsqueeze(1)).squeeze(1)
        others = logits.masked_fill(torch.nn.functional.one_hot(labels, 10).bool(), -torch.inf).amax(1)
        gaps[weight] = (true - others).mean().item()
    assert gaps[1.0] > 2 * gaps[0.0], gaps  # measured: 17.0 against 7.2
