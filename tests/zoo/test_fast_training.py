"""The fast CIFAR-10 recipe: it learns, its attack raises the loss, its guard keeps the best epoch."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from controversial.zoo import fast_training
from controversial.zoo.fast_training import (
    AdversarialSettings,
    FastRecipe,
    batch_augment,
    single_step_attack,
    train_fast,
)
from controversial.zoo.registry import create_arch
from controversial.zoo.train_options import TrainOptions

TINY_VGG = dict(widths=(4, 4, 8, 8, 8), fc=(8, 8), dropout=0.0)


def _coloured_squares(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes a tiny net separates in a few epochs: a bright or a dark square on noise."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 2
    images = 0.3 * torch.rand(n, 3, 32, 32, generator=generator)
    images[:, :, 8:24, 8:24] += (labels.float() * 0.7).view(-1, 1, 1, 1)
    return images.clamp(0, 1), labels


def _settings(**extra) -> TrainOptions:
    return TrainOptions(
        method="fast",
        epochs=6,
        batch_size=16,
        lr=0.05,
        weight_decay=5e-4,
        max_shift=2,
        extra={"ema_decay": 0.9, "bn_refresh_batches": 2, **extra},
    )


def test_fast_recipe_learns_and_returns_an_eval_mode_contiguous_net():
    images, labels = _coloured_squares()
    torch.manual_seed(0)
    net = create_arch("vgg16_bn", **TINY_VGG)
    lines: list[str] = []
    train_fast(net, images, labels, _settings(), lines.append)
    assert not net.training
    assert all(p.is_contiguous() for p in net.parameters())
    with torch.no_grad():
        accuracy = float((net(images).argmax(1) == labels).float().mean())
    assert accuracy >= 0.9, lines
    assert lines[0].startswith("epoch 1/6: train loss")


def test_unknown_recipe_keys_are_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['lable_smoothing'\].*label_smoothing"):
        FastRecipe.from_extra({"lable_smoothing": 0.1})
    with pytest.raises(ValueError, match=r"adversarial has unknown key\(s\) \['epsilon'\]"):
        FastRecipe.from_extra({"adversarial": {"norm": "linf", "epsilon": 0.03}})
    with pytest.raises(ValueError, match="adversarial.norm 'l1' unknown; allowed: linf, l2"):
        FastRecipe.from_extra({"adversarial": {"norm": "l1", "eps": 0.03}})


def test_batch_augment_flips_and_translates_each_image_on_its_own():
    images = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    generator = torch.Generator().manual_seed(1)
    unshifted = batch_augment(images, 0, generator)
    for original, augmented in zip(images, unshifted):  # with no shift, each image is itself or its mirror
        assert torch.equal(augmented, original) or torch.equal(augmented, original.flip(-1))
    shifted = batch_augment(images, 2, torch.Generator().manual_seed(2))
    assert shifted.shape == images.shape and not torch.equal(shifted, unshifted)


@pytest.mark.parametrize("norm, eps", [("linf", 8 / 255), ("l2", 1.0)])
@pytest.mark.parametrize("attack", ["n_fgsm", "fgsm_rs"])
def test_single_step_attack_raises_the_loss_and_respects_its_bounds(norm, eps, attack):
    images, labels = _coloured_squares(32)
    torch.manual_seed(0)
    net = create_arch("vgg16_bn", **TINY_VGG)
    train_fast(net, images, labels, _settings(), lambda _: None)
    settings = AdversarialSettings(norm=norm, eps=eps, attack=attack)

    def full_precision() -> torch.autocast:
        return torch.autocast("cpu", enabled=False)

    adversarial = single_step_attack(
        net, images, labels, settings, eps, torch.Generator().manual_seed(0), full_precision
    )
    with torch.no_grad():
        clean, attacked = F.cross_entropy(net(images), labels), F.cross_entropy(net(adversarial), labels)
    assert attacked > clean
    assert adversarial.min() >= 0 and adversarial.max() <= 1
    delta = (adversarial - images).flatten(1)
    bound = eps * (1.0 if attack == "fgsm_rs" else settings.noise_factor + settings.step_factor)
    size = delta.abs().amax(1) if norm == "linf" else delta.norm(dim=1)
    assert (size <= bound + 1e-5).all()


def test_guard_stops_at_catastrophic_overfitting_and_keeps_the_best_epoch(monkeypatch):
    images, labels = _coloured_squares(32)
    guard_results = iter([0.30, 0.40, 0.10, 0.50])  # epoch 3 collapses by more than guard_drop
    snapshots: list[dict[str, torch.Tensor]] = []

    def fake_pgd_accuracy(net, *args, **kwargs):
        snapshots.append({k: v.clone() for k, v in net.state_dict().items()})
        return next(guard_results)

    monkeypatch.setattr(fast_training, "pgd_accuracy", fake_pgd_accuracy)
    torch.manual_seed(0)
    net = create_arch("vgg16_bn", **TINY_VGG)
    lines: list[str] = []
    extra = {"bn_refresh_batches": 0, "adversarial": {"norm": "linf", "eps": 0.03, "guard_images": 8}}
    train_fast(net, images, labels, _settings(**extra), lines.append)
    assert len(snapshots) == 3 and "catastrophic overfitting" in lines[2]
    assert lines[-1] == "kept the weights of epoch 2 (guard PGD accuracy 40.0%)"
    for name, value in net.state_dict().items():
        assert torch.equal(value, snapshots[1][name]), name


def test_the_progress_monitor_reads_a_class_balanced_slice_of_a_class_sorted_test_set():
    from controversial.tasks.train import _test_monitor

    labels = torch.arange(10).repeat_interleave(100)  # stored by class, as the CIFAR-10 image folders are
    images = torch.zeros(len(labels), 3, 32, 32)

    class AlwaysAirplane(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.one_hot(torch.zeros(len(x), dtype=torch.long), 10).float()

    assert _test_monitor(images, labels, 200)(AlwaysAirplane()) == "test accuracy 10.00% (every 5th image)"


# --- the energy term (JEM) ------------------------------------------------------------------------

TINY_JEM = dict(backbone="wrn", backbone_kwargs=dict(depth=10, widen_factor=1, stem_stride=2), refine_steps=2)


def test_energy_settings_are_checked():
    with pytest.raises(ValueError, match=r"energy has unknown key\(s\) \['steps'\]"):
        FastRecipe.from_extra({"energy": {"steps": 5}})
    with pytest.raises(ValueError, match="energy.buffer_init 'zeros' unknown; allowed: uniform, class_gaussian"):
        FastRecipe.from_extra({"energy": {"buffer_init": "zeros"}})
    with pytest.raises(ValueError, match="adversarial and energy cannot be combined"):
        FastRecipe.from_extra({"energy": {}, "adversarial": {"norm": "linf", "eps": 0.03}})
    images, labels = _coloured_squares(16)
    with pytest.raises(ValueError, match="energy trains a joint energy model .* VGG.* has no classifier"):
        train_fast(create_arch("vgg16_bn", **TINY_VGG), images, labels, _settings(energy={}), lambda _: None)


def test_langevin_samples_descend_the_energy_and_replace_only_the_picked_buffer_slots():
    torch.manual_seed(0)
    net = create_arch("jem", **TINY_JEM).classifier.eval()
    images, labels = _coloured_squares(32)
    buffer = fast_training.uniform_sampler((3, 32, 32))(40, torch.Generator().manual_seed(1))
    before = buffer.clone()
    settings = fast_training.EnergySettings(sgld_steps=10, step_size=1.0, noise=0.0, buffer_size=40, reinit_prob=0.0)
    with torch.no_grad():
        logits = net(images[:8])
    starts = fast_training.uniform_sampler((3, 32, 32))
    _, gap = fast_training.contrastive_energy(
        net, logits, buffer, settings, starts, torch.Generator(), contextlib.nullcontext
    )
    changed = (buffer != before).flatten(1).any(1)
    assert int(changed.sum()) == 8  # one fresh slot per image of the batch, the rest untouched
    with torch.no_grad():
        energy_before = net(before[changed]).logsumexp(1).neg()
        energy_after = net(buffer[changed]).logsumexp(1).neg()
    assert (energy_after < energy_before).all()
    assert gap == pytest.approx(float(logits.logsumexp(1).neg().mean() - energy_after.mean()), abs=1e-5)


def test_energy_epochs_train_the_jem_classifier_with_batch_norm_statistics_frozen():
    images, labels = _coloured_squares()
    torch.manual_seed(0)
    net = create_arch("jem", **TINY_JEM)
    initial = {k: v.clone() for k, v in net.state_dict().items()}
    lines: list[str] = []
    energy = dict(start_epoch=0, sgld_steps=2, buffer_size=32, energy_l2=0.1)
    train_fast(net, images, labels, _settings(energy=energy, bn_refresh_batches=0), lines.append)
    assert not net.training and "energy gap E(data) - E(samples)" in lines[0]
    state = net.state_dict()
    statistics = [k for k in state if k.endswith(("running_mean", "running_var"))]
    assert statistics and all(torch.equal(state[k], initial[k]) for k in statistics)
    weights = [k for k in state if k.endswith("weight") and k not in statistics]
    assert all(not torch.equal(state[k], initial[k]) for k in weights if "conv" in k or "readout" in k)


def test_energy_auroc_is_the_share_of_noise_test_pairs_ordered_correctly():
    from controversial.zoo.training import energy_metrics

    torch.manual_seed(0)
    net = create_arch("jem", **TINY_JEM).eval()
    images, labels = _coloured_squares(20)
    metrics = energy_metrics(net, images, labels, n=10, seed=3)
    tests, _ = images[::2], labels[::2]
    noise = torch.rand(tests.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        e_test, e_noise = net.energy(tests), net.energy(noise)
    pairs = (e_noise[:, None] > e_test[None, :]).double() + 0.5 * (e_noise[:, None] == e_test[None, :]).double()
    assert metrics["energy_noise_auroc"] == pytest.approx(float(pairs.mean()), abs=1e-12)
    assert 0 <= metrics["test_accuracy_unrefined"] <= 1
    assert energy_metrics(create_arch("vgg16_bn", **TINY_VGG), images, labels) == {}


def test_a_non_finite_loss_stops_training_with_advice_instead_of_saving_nan_weights():
    images, labels = _coloured_squares(32)
    images[5] = float("nan")
    torch.manual_seed(0)
    with pytest.raises(FloatingPointError, match=r"diverged in epoch 1, step \d+ .* resume from it with a lower lr"):
        train_fast(create_arch("vgg16_bn", **TINY_VGG), images, labels, _settings(), lambda _: None)
