import torch

from controversial.zoo.registry import create_arch


def _tiny_abs(**overrides):
    kwargs = dict(
        image_shape=(1, 6, 6),
        latent_dim=3,
        encoder_hidden=(12,),
        decoder_hidden=(8, 12),
        n_prior_samples=4,
        inference_steps=15,
        warm_start_steps=2,
    )
    kwargs.update(overrides)
    torch.manual_seed(0)
    return create_arch("abs", **kwargs).eval()


def _synthesis_steps(model, images: torch.Tensor, rows: list[int]) -> None:
    """One synthesis step on elements ``rows`` of a fixed batch (a fresh batch when all are given)."""
    if len(rows) == len(images):
        model.reset_state()
    model.set_active_rows(torch.tensor(rows))
    model(images[rows])


def test_logits_are_minus_the_fit_loss_at_the_optimised_latent():
    model = _tiny_abs()
    images = torch.rand(4, 1, 6, 6)
    logits = model(images)
    latents = model.optimise_latents(images.flatten(1))
    assert logits.shape == (4, 10)
    assert torch.allclose(logits, -model.loss(images.flatten(1), latents).T, atol=1e-5)


def test_optimisation_lowers_the_loss_below_the_best_start():
    model = _tiny_abs()
    flat = torch.rand(4, 36)
    encoded = model.encode(flat)[0]
    start_loss = model.loss(flat, model._cold_start(flat, encoded))
    final_loss = model.loss(flat, model.optimise_latents(flat))
    assert torch.all(final_loss <= start_loss + 1e-6)
    assert final_loss.sum() < start_loss.sum()


def test_gradient_flows_to_the_image_and_matches_the_envelope_theorem():
    model = _tiny_abs(inference_steps=200)
    images = torch.rand(2, 1, 6, 6, requires_grad=True)
    logits = model(images)
    logits[:, 3].sum().backward()
    grad = images.grad.clone()
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    # At z*, d(-loss)/dx = -2 (x - G(z*)), independent of how z* moves with x.
    latents = model.optimise_latents(images.detach().flatten(1))
    recon = model.decode(latents)[3]
    expected = -2 * (images.detach().flatten(1) - recon)
    assert torch.allclose(grad.flatten(1), expected, atol=1e-5)


def test_warm_start_reuses_latents_for_the_active_rows_only():
    model = _tiny_abs()
    images = torch.rand(5, 1, 6, 6)
    _synthesis_steps(model, images, [0, 1, 2, 3, 4])
    stored = model._warm_latents.clone()
    _synthesis_steps(model, images, [1, 3])
    assert torch.equal(model._warm_latents[:, [0, 2, 4]], stored[:, [0, 2, 4]])
    assert not torch.equal(model._warm_latents[:, [1, 3]], stored[:, [1, 3]])
    model.reset_state()
    assert model._warm_latents is None


def test_elbo_training_step_reduces_the_loss():
    model = _tiny_abs()
    torch.manual_seed(1)
    batch = torch.rand(10, 16, 36)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = model.elbo_loss(batch).item()
    for _ in range(50):
        optimizer.zero_grad()
        model.elbo_loss(batch).backward()
        optimizer.step()
    assert model.elbo_loss(batch).item() < first


def test_scores_under_no_grad_and_refuses_inference_mode_clearly():
    model = _tiny_abs()
    images = torch.rand(3, 1, 6, 6)
    with torch.no_grad():
        assert torch.isfinite(model(images)).all()
    with torch.inference_mode():
        try:
            model(images)
        except RuntimeError as error:
            assert "torch.no_grad()" in str(error)
        else:
            raise AssertionError("inference_mode should be refused")


def test_cached_decoder_output_matches_the_stored_latents():
    """The warm start scores the previous optimum from a cache; the cache must be exactly G(z*)."""
    model = _tiny_abs()
    images = torch.rand(5, 1, 6, 6)
    _synthesis_steps(model, images, [0, 1, 2, 3, 4])
    _synthesis_steps(model, images * 0.9, [0, 4])
    assert torch.allclose(model._warm_pixel_logits, model.decoder(model._warm_latents), atol=1e-6)


def test_fast_elu_is_torch_elu_with_the_same_gradient():
    from controversial.zoo.archs.abs_vae import ELU

    inputs = torch.linspace(-8, 8, 1001, dtype=torch.float64).requires_grad_(True)
    inputs = inputs[inputs != 0].detach().requires_grad_(True)  # the kink: both one-sided slopes are 1
    fast = ELU()(inputs)
    (fast_grad,) = torch.autograd.grad(fast.sum(), inputs)
    reference = torch.nn.functional.elu(inputs)
    (reference_grad,) = torch.autograd.grad(reference.sum(), inputs)
    assert torch.allclose(fast, reference, atol=1e-12)
    assert torch.allclose(fast_grad, reference_grad, atol=1e-12)
