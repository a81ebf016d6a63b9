import pytest
import torch
from conftest import MNIST_CLASSES, make_tiny_model
from torch import nn

from controversial.synthesis.engine import (
    _compact,
    noise_images,
    ordered_class_pairs,
    score_images,
    synthesize_batch,
)
from controversial.synthesis.objectives import hard_score
from controversial.synthesis.options import SynthesisOptions
from controversial.zoo.readout import CalibratedModel, Calibration

FAST = dict(max_steps=60, stop_score=None)


def _problem(n_cells: int = 12):
    pairs = ordered_class_pairs()[:: 90 // n_cells][:n_cells]
    return torch.tensor(pairs), noise_images(pairs, [0] * len(pairs), (1, 28, 28))


def test_cell_enumeration():
    pairs = ordered_class_pairs()
    assert len(pairs) == 90 and len(set(pairs)) == 90 and all(a != b for a, b in pairs)


def test_batched_synthesis_raises_the_score_of_every_element(tiny_pair):
    targets, initial = _problem()
    before, _, _ = score_images(tiny_pair, initial, targets, SynthesisOptions())
    result = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(**FAST))
    assert torch.all(result.hard > before)
    assert result.hard.median() > 0.75
    assert result.images.shape == initial.shape
    assert torch.equal(result.images, torch.round(result.images * 255) / 255)  # 8-bit
    rescored, _, probabilities = score_images(tiny_pair, result.images, targets, SynthesisOptions())
    assert torch.allclose(rescored, result.hard)
    assert probabilities.shape == (len(targets), 2, 2)
    assert result.failures == [""] * len(targets)


def test_converged_elements_freeze_while_others_continue(tiny_pair):
    targets, initial = _problem(4)
    settings = SynthesisOptions(max_steps=40, stop_score=None, tolerance_levels=1e9, patience=2)
    result = synthesize_batch(tiny_pair, targets, initial, settings)
    assert result.converged.all() and result.steps.tolist() == [3, 3, 3, 3]  # "more than 2 quiet steps"

    settings = SynthesisOptions(max_steps=5, stop_score=None, tolerance_levels=0.0, patience=2)
    result = synthesize_batch(tiny_pair, targets, initial, settings)
    assert not result.converged.any() and result.steps.tolist() == [5, 5, 5, 5]


def test_stop_score_freezes_elements_that_are_already_good_enough(tiny_pair):
    targets, initial = _problem(4)
    result = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(max_steps=50, stop_score=1e-30))
    assert result.steps.tolist() == [1, 1, 1, 1]


@pytest.mark.slow
def test_stall_rule_stops_elements_whose_hard_score_stops_rising_and_only_those(tiny_pair):
    targets, initial = _problem(4)
    never_quiet = dict(stop_score=None, tolerance_levels=0.0, patience=10_000)
    # A gain no score can make: every element stops stall_steps after step 0 (its first best).
    result = synthesize_batch(
        tiny_pair, targets, initial, SynthesisOptions(max_steps=50, stall_steps=7, stall_gain=1.0, **never_quiet)
    )
    assert result.stalled.all() and not result.converged.any() and result.steps.tolist() == [8, 8, 8, 8]
    # The default gain: elements climb well past stall_steps, stop once they plateau, and lose little.
    free = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(max_steps=60, **never_quiet))
    ruled = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(max_steps=60, stall_steps=10, **never_quiet))
    assert not free.stalled.any() and (free.steps == 60).all()
    assert ruled.stalled.all() and (ruled.steps > 30).all() and (ruled.steps < 60).all()  # measured: 46-56
    assert (free.hard - ruled.hard).abs().max() < 0.02  # measured: at most 0.005


def test_stall_rule_on_the_smooth_score_follows_the_objective_not_the_probability(tiny_pair):
    targets, initial = _problem(4)
    never_quiet = dict(stop_score=None, tolerance_levels=0.0, patience=10_000, max_steps=60)
    impossible = synthesize_batch(
        tiny_pair, targets, initial, SynthesisOptions(stall_steps=7, stall_gain=1e6, stall_on="smooth", **never_quiet)
    )
    assert impossible.stalled.all() and impossible.steps.tolist() == [8, 8, 8, 8]
    # Past a hard score of about 0.9 the probabilities saturate but the logits (the smooth score) keep rising:
    # the hard watch stops every element (measured: 34-37 steps), the smooth watch none.
    on_hard, on_smooth = (
        synthesize_batch(
            tiny_pair, targets, initial, SynthesisOptions(stall_steps=10, stall_gain=0.05, stall_on=on, **never_quiet)
        )
        for on in ("hard", "smooth")
    )
    assert on_hard.stalled.all() and (on_hard.steps < 45).all()
    assert not on_smooth.stalled.any() and (on_smooth.steps == 60).all()
    with pytest.raises(ValueError, match="stall_on"):
        SynthesisOptions(stall_steps=10, stall_on="soft")


class _NaNWhenMarked(nn.Module):
    """Returns NaN logits for images whose top-left pixel is bright: a model that blows up."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, images):
        logits = self.inner(images)
        marked = images[:, 0, 0, 0] > 0.99
        return torch.where(marked[:, None], torch.full_like(logits, float("nan")), logits)


def test_nan_marks_only_that_element_failed_and_the_rest_continue(tiny_pair):
    targets, initial = _problem(4)
    initial[:, 0, 0, 0] = 0.5
    initial[1, 0, 0, 0] = 1.0
    broken = CalibratedModel(
        _NaNWhenMarked(tiny_pair[0].net), Calibration(1.0, -1.0, "identity"), "broken", "mnist", MNIST_CLASSES
    )
    result = synthesize_batch([broken, tiny_pair[1]], targets, initial, SynthesisOptions(**FAST))
    assert result.failures[1].startswith("non-finite score or gradient at step 0")
    assert result.steps[1].item() == 0
    assert [result.failures[i] for i in (0, 2, 3)] == ["", "", ""]
    assert torch.all(result.steps[[0, 2, 3]] == 60)


def test_same_seed_gives_identical_images(tiny_pair):
    targets, initial = _problem(6)
    settings = SynthesisOptions(max_steps=30, stop_score=None, jitter=2)
    first = synthesize_batch(tiny_pair, targets, initial, settings, seed=3)
    second = synthesize_batch(tiny_pair, targets, initial, settings, seed=3)
    assert torch.equal(first.images, second.images)


def test_fourier_parametrization_also_improves_the_score(tiny_pair):
    targets, initial = _problem(6)
    before, _, _ = score_images(tiny_pair, initial, targets, SynthesisOptions())
    result = synthesize_batch(tiny_pair, targets, initial, SynthesisOptions(parametrization="fourier", **FAST))
    assert torch.all(result.hard > before)


@pytest.mark.parametrize(
    "optimizer",
    [
        lambda params: torch.optim.SGD(params, lr=5.0),
        lambda params: torch.optim.SGD(params, lr=2.0, momentum=0.9),
        lambda params: torch.optim.RMSprop(params, lr=0.05),
        lambda params: torch.optim.Adafactor(
            params, lr=0.05
        ),  # row and column factors: state not shaped like the images
    ],
    ids=["sgd", "sgd_momentum", "rmsprop", "adafactor"],
)
def test_any_torch_optimizer_can_drive_synthesis_while_elements_finish(tiny_pair, optimizer):
    targets, initial = _problem(6)
    before, _, _ = score_images(tiny_pair, initial, targets, SynthesisOptions())
    result = synthesize_batch(
        tiny_pair, targets, initial, SynthesisOptions(max_steps=80, stop_score=0.9), optimizer=optimizer
    )
    assert torch.all(result.hard > before)
    assert result.failures == [""] * len(targets)
    assert len(set(result.steps.tolist())) > 1  # some finished early, so the batch was compacted


def test_three_models_each_detect_their_own_target():
    models = [make_tiny_model(s) for s in (1, 2, 3)]
    targets = torch.tensor([[0, 1, 2], [3, 4, 5], [7, 8, 9]])
    initial = noise_images([tuple(t) for t in targets.tolist()], [0] * 3, (1, 28, 28))
    result = synthesize_batch(models, targets, initial, SynthesisOptions(max_steps=80, stop_score=None))
    logits = [m(result.images) for m in models]
    assert torch.allclose(hard_score(logits, targets), result.hard)
    assert result.probabilities.shape == (3, 3, 3)
    diagonal = result.probabilities.diagonal(dim1=1, dim2=2)
    assert torch.all(diagonal > 0.5)


def test_noise_start_of_a_cell_does_not_depend_on_its_batch():
    alone = noise_images([(3, 7)], [4], (1, 28, 28))
    batched = noise_images([(1, 2), (3, 7)], [0, 4], (1, 28, 28))
    assert torch.equal(alone[0], batched[1])
    assert not torch.equal(batched[0], batched[1])


def test_an_element_follows_the_same_path_alone_as_in_a_batch_where_others_finish_first(tiny_pair):
    # The batch drops finished elements and slices the optimiser's state to match; a misaligned
    # Adam moment would send the survivors elsewhere.
    targets, initial = _problem(8)
    settings = SynthesisOptions(max_steps=200, stop_score=0.97)
    batched = synthesize_batch(tiny_pair, targets, initial, settings)
    assert len(set(batched.steps.tolist())) > 3  # elements really do finish at different steps
    for index in range(len(targets)):
        alone = synthesize_batch(tiny_pair, targets[index : index + 1], initial[index : index + 1], settings)
        assert alone.steps.item() == batched.steps[index].item()
        assert torch.allclose(alone.smooth, batched.smooth[index : index + 1], atol=1e-4)


def test_compaction_keeps_the_optimiser_state_of_the_remaining_rows():
    params = torch.arange(12.0).reshape(4, 3).requires_grad_(True)
    optimizer = torch.optim.SGD([params], lr=0.1, momentum=0.9)
    params.grad = torch.arange(12.0).reshape(4, 3)
    optimizer.step()
    momentum = optimizer.state[params]["momentum_buffer"].clone()
    keep = torch.tensor([True, False, True, False])
    kept, compacted = _compact(params, optimizer, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), keep)
    assert torch.equal(kept, params.detach()[keep]) and kept.requires_grad and kept.is_leaf
    assert torch.equal(compacted.state[kept]["momentum_buffer"], momentum[keep])
