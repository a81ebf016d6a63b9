"""``synthesis.method=diffusion``: guided DDIM sampling of a (tiny, random) diffusers UNet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_tiny_model
from helpers import interrupt_synthesis, run_task, tiny_abs_vgg_overrides

from controversial.errors import UserError
from controversial.records.manifest import read_manifest, without_timing
from controversial.synthesis.diffusion import sample_batch
from controversial.synthesis.diffusion_model import load_prior
from controversial.synthesis.engine import gaussian_noise, ordered_class_pairs, score_images
from controversial.synthesis.options import METHODS, DiffusionOptions, SynthesisOptions
from controversial.synthesis.parametrization import quantize
from controversial.synthesis.stimuli import load_png
from controversial.zoo.bundled import load_model

diffusers = pytest.importorskip("diffusers")


def save_tiny_prior(folder: Path, sample_size: int = 28, channels: int = 1, pipeline: bool = True) -> Path:
    """A tiny random UNet2DModel (and its DDPM schedule) saved as a user would: save_pretrained, safetensors."""
    torch.manual_seed(0)
    unet = diffusers.UNet2DModel(
        sample_size=sample_size,
        in_channels=channels,
        out_channels=channels,
        block_out_channels=(8, 16),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2")
    if pipeline:
        diffusers.DDPMPipeline(unet=unet, scheduler=scheduler).save_pretrained(folder, safe_serialization=True)
    else:
        unet.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="module")
def prior_folder(tmp_path_factory) -> Path:
    return save_tiny_prior(tmp_path_factory.mktemp("prior") / "ddpm")


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> list[str]:
    return tiny_abs_vgg_overrides(tmp_path_factory.mktemp("checkpoints"))


def _cells(n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    cells = ordered_class_pairs()[:: 90 // n][:n]
    return torch.tensor(cells), gaussian_noise(cells, [0] * n, (1, 28, 28))


def test_zero_guidance_reproduces_the_schedulers_own_unguided_samples(prior_folder):
    prior = load_prior(str(prior_folder), "mnist")
    pipeline = diffusers.DDIMPipeline(
        unet=prior.unet, scheduler=diffusers.DDIMScheduler.from_config(prior.scheduler_config)
    )
    own = pipeline(batch_size=4, generator=torch.Generator().manual_seed(3), num_inference_steps=8, output_type="pt")
    noise = torch.randn((4, 1, 28, 28), generator=torch.Generator().manual_seed(3))  # the pipeline's draw
    options = DiffusionOptions(guidance_scale=0.0, sampling_steps=8, eta=0.0)
    models = [make_tiny_model(1), make_tiny_model(2)]
    result = sample_batch(models, torch.tensor([[0, 1]] * 4), noise, SynthesisOptions(), options, prior)
    assert torch.equal(
        result.images, quantize(own.images.permute(0, 3, 1, 2) if own.images.shape[-1] == 1 else own.images)
    )
    assert (result.steps == 8).all() and result.failures == [""] * 4


def test_eta_draws_each_steps_fresh_noise_as_the_schedulers_own_stochastic_loop(prior_folder):
    prior = load_prior(str(prior_folder), "mnist")
    noise = torch.randn((3, 1, 28, 28), generator=torch.Generator().manual_seed(1))
    scheduler = diffusers.DDIMScheduler.from_config(prior.scheduler_config)
    scheduler.set_timesteps(6)
    generator, own = torch.Generator().manual_seed(7), noise * scheduler.init_noise_sigma
    with torch.no_grad():
        for t in scheduler.timesteps:
            own = scheduler.step(prior.unet(own, t).sample, t, own, eta=1.0, generator=generator).prev_sample
    models, targets = [make_tiny_model(1), make_tiny_model(2)], torch.tensor([[0, 1]] * 3)
    sample = {
        eta: sample_batch(
            models,
            targets,
            noise,
            SynthesisOptions(),
            DiffusionOptions(guidance_scale=0.0, sampling_steps=6, eta=eta),
            prior,
            seed=7,
        ).images
        for eta in (0.0, 1.0)
    }
    assert torch.equal(sample[1.0], quantize(own.div(2).add(0.5).clamp(0, 1)))
    assert not torch.equal(sample[1.0], sample[0.0])


@pytest.mark.parametrize("guidance, scale", [("clean", 0.1), ("noise", 1.0)])
def test_guidance_raises_the_objective_over_unguided_sampling(prior_folder, guidance, scale):
    prior = load_prior(str(prior_folder), "mnist")
    targets, noise = _cells()
    models = [make_tiny_model(1), make_tiny_model(2)]
    unguided, guided = (
        sample_batch(
            models,
            targets,
            noise,
            SynthesisOptions(),
            DiffusionOptions(guidance=guidance, guidance_scale=s, sampling_steps=10),
            prior,
        )
        for s in (0.0, scale)
    )
    assert (guided.smooth > unguided.smooth).float().mean() >= 0.9
    assert guided.hard.median() > unguided.hard.median()
    assert guided.model_seconds > unguided.model_seconds > 0  # guided, the classifiers run at every step


def test_guide_until_lets_the_prior_take_the_steps_of_images_already_controversial(prior_folder):
    prior = load_prior(str(prior_folder), "mnist")
    targets, noise = _cells()
    models = [make_tiny_model(1), make_tiny_model(2)]

    def sample(scale: float, until: float | None = None):
        options = DiffusionOptions(guidance_scale=scale, sampling_steps=10, guide_until=until)
        return sample_batch(models, targets, noise, SynthesisOptions(), options, prior)

    unguided, guided, gated = sample(0.0), sample(0.1), sample(0.1, 0.7)
    assert torch.equal(sample(0.1, 1e-9).images, unguided.images)  # no hard score is below 1e-9: never guided

    def distance(result):
        return (result.images - unguided.images).abs().mean()

    assert 0 < distance(gated) < 0.5 * distance(guided)  # guided less, closer to the prior's own samples ...
    assert gated.hard.median() > unguided.hard.median() + 0.3  # ... and still steered


def test_recurrence_takes_each_step_k_times_and_is_seeded(prior_folder):
    prior = load_prior(str(prior_folder), "mnist")
    targets, noise = _cells(4)
    models = [make_tiny_model(1), make_tiny_model(2)]
    options = DiffusionOptions(guidance_scale=0.1, sampling_steps=4, recurrence=3)
    first = sample_batch(models, targets, noise, SynthesisOptions(), options, prior, seed=1)
    again = sample_batch(models, targets, noise, SynthesisOptions(), options, prior, seed=1)
    other = sample_batch(models, targets, noise, SynthesisOptions(), options, prior, seed=2)
    assert torch.equal(first.images, again.images) and not torch.equal(first.images, other.images)
    assert (first.steps == 12).all()


SETTINGS = [
    "synthesis.method=diffusion",
    "diffusion.sampling_steps=6",
    "diffusion.guidance_scale=0.02",
    "synthesis.classes=[0,1,2,3]",
    "progress=false",
]
CELLS = set(ordered_class_pairs([0, 1, 2, 3]))


@pytest.mark.slow
def test_the_task_writes_accepted_stimuli_a_manifest_and_the_run_settings(tmp_path, pair, prior_folder):
    rows = run_task(
        "synthesize",
        [*pair, *SETTINGS, f"diffusion.model={prior_folder}", "synthesis.threshold=0.6", "max_attempts=2"],
        tmp_path / "run",
    )
    run = tmp_path / "run"
    assert {r.cell for r in rows} == CELLS and any(r.accepted for r in rows)
    models = [load_model(o.split("=", 1)[1]) for o in pair if ".checkpoint=" in o]
    written = [r for r in read_manifest(run / "manifest.csv") if r.image_file]
    images = torch.stack([torch.from_numpy(load_png(run / r.image_file)) for r in written])
    targets = torch.tensor([[r.class_a, r.class_b] for r in written])
    hard, _, _ = score_images(models, images, targets, SynthesisOptions())
    # the same acceptance rule as gradient ascent: the hard score, in float32, of exactly the 8-bit PNG
    assert torch.allclose(hard, torch.tensor([r.hard_score for r in written]), atol=1e-6)
    assert all(r.accepted == (r.hard_score >= 0.6) for r in written)
    assert all(r.init == "gaussian" and r.steps == 6 for r in written)
    retried = [r for r in rows if r.seed > 0]  # a retry: the same cell from a new seed's noise
    assert retried and all(any(q.cell == r.cell and not q.accepted for q in rows if q.seed == 0) for r in retried)
    settings = json.loads((run / "run_settings.json").read_text())
    assert settings["synthesis"]["method"] == "diffusion" and settings["diffusion"]["sampling_steps"] == 6
    assert len(settings["diffusion"]["weights_sha256"]) == 64  # a resumed run must use the same prior
    assert (run / "grid.png").is_file()


def test_a_retry_is_a_new_noise_seed():
    cells = [(3, 5), (3, 5)]
    first, retry = gaussian_noise(cells, [0, 1], (1, 28, 28))
    assert not torch.equal(first, retry)
    assert torch.equal(gaussian_noise([(3, 5)], [0], (1, 28, 28))[0], first)  # a start does not depend on its batch


@pytest.mark.slow
def test_an_interrupted_diffusion_run_resumes_to_the_uninterrupted_result(tmp_path, pair, prior_folder, monkeypatch):
    overrides = [*pair, *SETTINGS, f"diffusion.model={prior_folder}", "synthesis.threshold=0.6", "max_attempts=3"]
    full = run_task("synthesize", overrides, tmp_path / "full")
    assert len(full) > len(CELLS)  # some cells were retried, so the interrupt below falls in a later attempt
    interrupt_synthesis(monkeypatch, 3, attempt=2)
    with pytest.raises(SystemExit):
        run_task("synthesize", overrides, tmp_path / "run")
    kept = read_manifest(tmp_path / "run" / "manifest.csv")
    assert len(kept) == len(CELLS)  # the first attempt's rows; the interrupted batch kept nothing half-done
    monkeypatch.undo()
    resumed = run_task("synthesize", overrides, tmp_path / "run")
    assert without_timing(resumed) == without_timing(full)


def test_a_prior_that_does_not_fit_the_dataset_is_refused_by_name(tmp_path):
    wrong_size = save_tiny_prior(tmp_path / "cifar_like", sample_size=32, channels=3, pipeline=False)
    with pytest.raises(UserError, match=r"cifar_like.*3-channel 32x32.*'mnist' has 1-channel 28x28"):
        load_prior(str(wrong_size), "mnist")
    assert load_prior(str(wrong_size), "cifar10").folder == wrong_size  # a bare UNet folder, no scheduler: defaults


def test_only_safetensors_of_a_unet_are_loaded(tmp_path):
    folder = save_tiny_prior(tmp_path / "bin", pipeline=False)
    (folder / "diffusion_pytorch_model.safetensors").rename(folder / "diffusion_pytorch_model.bin")
    with pytest.raises(UserError, match="no .safetensors"):
        load_prior(str(folder), "mnist")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "_class_name": "UNet2DConditionModel"}))
    with pytest.raises(UserError, match="UNet2DConditionModel"):
        load_prior(str(folder), "mnist")
    outside = save_tiny_prior(tmp_path / "elsewhere", pipeline=False)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "config.json").write_text((outside / "config.json").read_text())
    (linked / "diffusion_pytorch_model.safetensors").symlink_to(outside / "diffusion_pytorch_model.safetensors")
    with pytest.raises(UserError, match="leads outside"):
        load_prior(str(linked), "mnist")
    with pytest.raises(UserError, match="not a folder"):
        load_prior(str(tmp_path / "missing"), "mnist")


def test_methods_are_a_registry_and_diffusion_takes_no_init(pair):
    assert METHODS.names() == ["diffusion", "gradient"]
    with pytest.raises(ValueError, match="unknown synthesis method 'ddim'.*diffusion, gradient"):
        SynthesisOptions(method="ddim")
    from helpers import settings_for

    with pytest.raises(Exception, match="init=test_image is for gradient ascent"):
        settings_for("synthesize", [*pair, "synthesis.method=diffusion", "init=test_image"])


def test_the_bundled_prior_is_no_classifier_and_fits_mnist():
    from controversial.zoo.bundled import MODELS_DIR, list_checkpoints

    prior_dir = MODELS_DIR / "diffusion"
    assert not any(prior_dir in p.parents for paths in list_checkpoints().values() for p in paths)
    assert not list(prior_dir.glob("*/*.yaml")) and not list(prior_dir.glob("*/*.pt"))  # what the model scans read
    card = json.loads((prior_dir / "mnist" / "ddpm" / "card.json").read_text())
    assert card["dataset"] == "mnist" and "diffusion_training" in card["command"]
    size = sum(p.stat().st_size for p in (prior_dir / "mnist" / "ddpm").rglob("*.safetensors"))
    assert size < 10e6


def test_an_ensemble_is_sampled_and_scored_on_every_instance(prior_folder):
    """With groups (trained instances of a model), the sampler's scores are the worst over each model's instances,
    as gradient ascent's are."""
    prior = load_prior(str(prior_folder), "mnist")
    targets, noise = _cells(6)
    models = [make_tiny_model(1), make_tiny_model(3), make_tiny_model(2)]
    options = DiffusionOptions(guidance_scale=0.1, sampling_steps=6)
    result = sample_batch(models, targets, noise, SynthesisOptions(), options, prior, groups=[0, 0, 1])
    pairwise = [score_images([a, models[2]], result.images, targets, SynthesisOptions())[0] for a in models[:2]]
    assert torch.allclose(result.hard, torch.minimum(*pairwise))
