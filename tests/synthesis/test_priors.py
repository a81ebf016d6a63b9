"""Image priors: transformation robustness, the CPPN, and a generator's latent space as parametrisations."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from controversial.errors import UserError
from controversial.synthesis.engine import noise_images, score_images, synthesize_batch
from controversial.synthesis.generators import (
    GeneratorInfo,
    MLPDecoder,
    bundled_generators,
    check_generator,
    read_generator,
    save_generator,
)
from controversial.synthesis.options import GeneratorOptions, SynthesisOptions
from controversial.synthesis.parametrization import parametrization
from controversial.synthesis.transforms import jitter, scale_rotate, transform
from controversial.zoo.bundled import list_checkpoints

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)


# --- transformation robustness ------------------------------------------------------------------------------------


def test_transforms_are_off_by_default_and_draw_nothing() -> None:
    images = torch.rand(3, *MNIST)
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    assert transform(images, SynthesisOptions(), generator) is images
    assert torch.equal(generator.get_state(), state)  # the pixel job's random stream is untouched


def test_jitter_alone_is_the_previous_circular_shift() -> None:
    images = torch.rand(3, *MNIST)
    a, b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(transform(images, SynthesisOptions(jitter=3), a), jitter(images, 3, b))


def test_scale_and_rotation_are_differentiable_and_the_identity_at_zero() -> None:
    images = torch.rand(2, *CIFAR, requires_grad=True)
    assert torch.allclose(scale_rotate(images, 1.0, 0.0), images, atol=1e-5)
    moved = transform(images, SynthesisOptions(scale=0.1, rotate=10), torch.Generator().manual_seed(0))
    assert not torch.allclose(moved, images, atol=1e-3)
    moved.square().sum().backward()
    assert images.grad is not None and images.grad.abs().sum() > 0


# --- parametrisations round-trip ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pixel", "fourier"])
@pytest.mark.parametrize("shape", [MNIST, CIFAR])
def test_exact_parametrisations_round_trip(name: str, shape: tuple[int, int, int]) -> None:
    images = torch.rand(3, *shape) * 0.9 + 0.05
    param = parametrization(SynthesisOptions(parametrization=name), shape)
    assert torch.allclose(param.to_images(param.from_images(images)), images, atol=1e-4)


@pytest.mark.parametrize("shape", [MNIST, CIFAR])
def test_the_cppn_recovers_an_image_it_made_and_projects_noise(shape: tuple[int, int, int]) -> None:
    param = parametrization(SynthesisOptions(parametrization="cppn", cppn_layers=3, cppn_width=8), shape)
    start = param.from_images(torch.rand(2, *shape))
    made = start.clone()
    n_out = (param._layers[-1][0] + 1) * shape[0]
    made[:, -n_out:] = torch.randn(2, n_out, generator=torch.Generator().manual_seed(0)) * 5
    images = param.to_images(made)
    assert images.shape == (2, *shape) and 0 <= images.min() and images.max() <= 1
    assert torch.allclose(param.to_images(param.from_images(images)), images, atol=1e-3)
    # one row depends on its own image only
    noise = torch.rand(3, *shape)
    assert torch.allclose(param.from_images(noise)[1:], param.from_images(noise[1:]), atol=1e-5)


# --- generators ---------------------------------------------------------------------------------------------------


def _tiny_generator_file(tmp_path, shape=MNIST, latent_dim: int = 4):
    torch.manual_seed(0)
    net = MLPDecoder(latent_dim, shape[0], shape[1], width=8)
    info = GeneratorInfo(
        "tiny",
        "mnist",
        "mlp_decoder",
        {"latent_dim": latent_dim, "channels": shape[0], "size": shape[1], "width": 8},
        latent_dim,
    )
    path = tmp_path / "generators" / "mnist" / "tiny.pt"
    save_generator(path, net, info)
    return path, net


def _user_module(tmp_path, monkeypatch, body: str) -> None:
    (tmp_path / "my_generators.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONTROVERSIAL_TRUSTED_MODULES", "my_generators")


def test_a_generator_file_holds_float16_weights_and_its_card(tmp_path) -> None:
    path, net = _tiny_generator_file(tmp_path)
    info, state = read_generator(path)
    assert info.arch == "mlp_decoder" and info.latent_dim == 4
    assert torch.load(path, weights_only=True)["state"]["logits.0.weight"].dtype == torch.float16
    assert torch.allclose(state["logits.0.weight"], net.state_dict()["logits.0.weight"], atol=1e-3)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="junk.pt: not a generator file"):
        read_generator(tmp_path / "junk.pt")


def test_a_generator_of_the_wrong_shape_or_range_is_refused_by_name() -> None:
    with pytest.raises(UserError, match=r"generator cifar10/vae makes images of shape \(3, 32, 32\).*\(1, 28, 28\)"):
        check_generator(MLPDecoder(4, 3, 32, 8), 4, MNIST, "cifar10/vae")
    tanh = nn.Sequential(nn.Linear(4, 784), nn.Tanh(), nn.Unflatten(1, MNIST))
    with pytest.raises(UserError, match=r"generator mine: its images range over \[-.*not \[0, 1\]"):
        check_generator(tanh, 4, MNIST, "mine")


def test_an_unknown_or_missing_generator_is_a_user_error() -> None:
    with pytest.raises(UserError, match="needs synthesis.generator.name"):
        parametrization(SynthesisOptions(parametrization="generator"), MNIST)
    with pytest.raises(UserError, match="'mnist/nope': no such generator; bundled:"):
        parametrization(SynthesisOptions(parametrization="generator", generator={"name": "mnist/nope"}), MNIST)


def test_a_users_python_generator_with_weights_from_a_file(tmp_path, monkeypatch) -> None:
    _user_module(
        tmp_path,
        monkeypatch,
        """
        import torch
        from torch import nn

        class Blobs(nn.Module):
            latent_dim = 3

            def __init__(self, size=28):
                super().__init__()
                self.size = size
                self.linear = nn.Linear(3, size * size)

            def forward(self, z):
                return torch.sigmoid(self.linear(z)).view(-1, 1, self.size, self.size)
        """,
    )
    import my_generators  # type: ignore[import-not-found]

    trained = my_generators.Blobs()
    torch.save(trained.state_dict(), tmp_path / "blobs.pt")
    options = SynthesisOptions(
        parametrization="generator",
        generator=GeneratorOptions(name="python:my_generators:Blobs", weights=str(tmp_path / "blobs.pt")),
    )
    param = parametrization(options, MNIST)
    assert torch.equal(param.net.linear.weight, trained.linear.weight)  # the file's weights, not a fresh init
    wrong = options.model_copy(
        update={"generator": GeneratorOptions(name="python:my_generators:Blobs", kwargs={"size": 32})}
    )
    with pytest.raises(UserError, match=r"makes images of shape \(1, 32, 32\)"):
        parametrization(wrong, MNIST)


def test_generator_starts_are_prior_draws_keyed_by_the_start_image(tmp_path, monkeypatch) -> None:
    path, _ = _tiny_generator_file(tmp_path)
    monkeypatch.setattr("controversial.synthesis.generators.GENERATORS_DIR", tmp_path / "generators")
    param = parametrization(SynthesisOptions(parametrization="generator", generator={"name": "mnist/tiny"}), MNIST)
    noise = noise_images([(0, 1), (1, 0), (0, 1)], [0, 0, 1], MNIST)
    codes = param.from_images(noise)
    assert codes.shape == (3, 4)
    assert torch.equal(param.from_images(noise[1:2]), codes[1:2])  # whatever else is in the batch
    assert not torch.equal(codes[0], codes[2])  # a new seed, a new code
    images = param.to_images(codes)
    assert images.shape == (3, *MNIST)
    assert param.code(torch.full((1, 4), 100.0)).max() <= 2.0  # the truncation bounds the code


def test_a_tiny_generator_synthesizes_a_two_class_pair_end_to_end(tmp_path, monkeypatch, tiny_pair) -> None:
    _tiny_generator_file(tmp_path)
    monkeypatch.setattr("controversial.synthesis.generators.GENERATORS_DIR", tmp_path / "generators")
    assert bundled_generators(tmp_path / "generators") == ["mnist/tiny"]
    targets = torch.tensor([[0, 1], [1, 0]])
    initial = noise_images([(0, 1), (1, 0)], [0, 0], MNIST)
    options = SynthesisOptions(
        parametrization="generator",
        generator={"name": "mnist/tiny"},
        max_steps=30,
        stop_score=None,
        jitter=1,
        scale=0.05,
        rotate=5,
    )
    param = parametrization(options, MNIST)
    start = param.to_images(param.from_images(initial))
    before, _, _ = score_images(tiny_pair, torch.round(start * 255) / 255, targets, options)
    result = synthesize_batch(tiny_pair, targets, initial, options)
    assert result.images.shape == (2, *MNIST) and not any(result.failures)
    assert torch.all(result.hard > before)


def test_the_model_registry_does_not_take_generators_for_models(tmp_path) -> None:
    _tiny_generator_file(tmp_path)
    assert list_checkpoints(tmp_path) == {}


def test_the_generator_card_is_written_from_the_files(tmp_path) -> None:
    from controversial.synthesis.generators import write_generator_card

    _tiny_generator_file(tmp_path)
    card = write_generator_card(tmp_path / "generators").read_text()
    assert "## mnist/tiny" in card and "`mlp_decoder`" in card and "do not edit by hand" in card


def test_a_generator_residual_stays_within_its_bound(tmp_path, monkeypatch) -> None:
    _tiny_generator_file(tmp_path)
    monkeypatch.setattr("controversial.synthesis.generators.GENERATORS_DIR", tmp_path / "generators")
    plain = parametrization(SynthesisOptions(parametrization="generator", generator={"name": "mnist/tiny"}), MNIST)
    options = SynthesisOptions(parametrization="generator", generator={"name": "mnist/tiny", "residual": 0.1})
    param = parametrization(options, MNIST)
    noise = noise_images([(0, 1), (1, 0)], [0, 0], MNIST)
    start = param.from_images(noise)
    assert start.shape == (2, 4 + 784)
    assert torch.equal(param.to_images(start), plain.to_images(plain.from_images(noise)))  # starts on the generator
    pushed = start.clone()
    pushed[:, 4:] = 50.0
    assert (param.to_images(pushed) - plain.to_images(start[:, :4])).max() <= 0.1 + 1e-6


def test_a_users_generator_module_is_imported_only_when_allowed(tmp_path, monkeypatch) -> None:
    (tmp_path / "unvetted_generators.py").write_text("raise SystemExit('imported!')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CONTROVERSIAL_TRUSTED_MODULES", raising=False)
    options = SynthesisOptions(parametrization="generator", generator={"name": "python:unvetted_generators:Make"})
    with pytest.raises(UserError, match="'unvetted_generators' is not among the modules you allow"):
        parametrization(options, MNIST)


def test_a_run_recorded_before_the_prior_options_resumes(tmp_path) -> None:
    import json

    from controversial.records.runs import RUN_SETTINGS_NAME
    from controversial.synthesis.runstate import check_run_settings

    current = {"seed": 0, "synthesis": SynthesisOptions().model_dump()}
    new_keys = ("scale", "rotate", "cppn_layers", "cppn_width", "generator")
    old = {"seed": 0, "synthesis": {k: v for k, v in current["synthesis"].items() if k not in new_keys}}
    (tmp_path / RUN_SETTINGS_NAME).write_text(json.dumps(old))
    check_run_settings(tmp_path, current)  # no error: the keys it lacks had their defaults' behaviour
    with pytest.raises(UserError, match="other settings"):
        check_run_settings(tmp_path, {"seed": 0, "synthesis": SynthesisOptions(rotate=5).model_dump()})
