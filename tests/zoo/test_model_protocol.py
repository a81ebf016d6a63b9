"""The contract between models and the synthesis loop (``controversial/zoo/protocol.py``), checked both ways:
the models satisfy it, and the loop calls it as declared."""

import pytest
import torch
from conftest import make_tiny_model
from torch import nn

from controversial.synthesis.engine import noise_images, ordered_class_pairs, synthesize_batch
from controversial.synthesis.natural import calibrated_logits
from controversial.synthesis.options import SynthesisOptions
from controversial.zoo.protocol import StatefulNet, SynthesisModel, require_autograd, scoring
from controversial.zoo.readout import IDENTITY, CalibratedModel
from controversial.zoo.registry import create_arch


class RecordingNet(nn.Module):
    """A stateful net that records the hook calls and the rows each forward pass saw."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = create_arch("tiny_mlp", seed=1)
        self.calls: list[tuple[str, list[int] | None]] = []
        self.rows: torch.Tensor | None = None

    def reset_state(self) -> None:
        self.calls.append(("reset", None))
        self.rows = None

    def set_active_rows(self, rows: torch.Tensor) -> None:
        self.calls.append(("rows", rows.tolist()))
        self.rows = rows

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        assert self.rows is None or len(self.rows) == len(images), "rows must describe the batch passed next"
        return self.inner(images)


def _recording_model() -> tuple[CalibratedModel, RecordingNet]:
    net = RecordingNet()
    return CalibratedModel(net, IDENTITY, "recording", "mnist", tuple(str(i) for i in range(10))), net


def test_the_models_satisfy_the_protocol():
    assert isinstance(make_tiny_model(0), SynthesisModel)
    assert isinstance(
        create_arch(
            "abs", image_shape=(1, 6, 6), latent_dim=3, encoder_hidden=(12,), decoder_hidden=(8, 12), n_prior_samples=4
        ),
        StatefulNet,
    )
    assert not isinstance(create_arch("tiny_mlp"), StatefulNet)
    make_tiny_model(0).set_active_rows(torch.arange(3))  # a stateless net ignores the hooks


def test_the_loop_resets_then_names_the_shrinking_rows_before_every_step():
    model, net = _recording_model()
    pairs = ordered_class_pairs()[:6]
    settings = SynthesisOptions(max_steps=40, stop_score=None, patience=2, tolerance_levels=255)
    initial = noise_images(pairs, [0] * 6, (1, 28, 28))
    result = synthesize_batch([model, make_tiny_model(2)], torch.tensor(pairs), initial, settings)
    assert net.calls[0] == ("reset", None)
    steps = [rows for kind, rows in net.calls[1:-1]]
    assert all(kind == "rows" for kind, _ in net.calls[1:-1])
    assert steps[0] == list(range(6))
    assert all(set(later) <= set(earlier) for earlier, later in zip(steps, steps[1:]))
    assert len(steps) == int(result.steps.max()) and net.calls[-1] == ("reset", None)  # the final rescoring starts cold


def test_scoring_allows_inner_autograd_and_inference_mode_is_refused():
    x = torch.ones(2, requires_grad=True)
    with scoring():
        assert not torch.is_grad_enabled()
        with torch.enable_grad():
            (x * x).sum().backward()  # what ABS and JEM do inside their forward pass
        require_autograd("this model")
    assert torch.equal(x.grad, 2 * torch.ones(2))
    with torch.inference_mode(), pytest.raises(RuntimeError, match=r"this model with autograd.*torch.no_grad\(\)"):
        require_autograd("this model")


def test_natural_image_scoring_resets_state_per_batch():
    model, net = _recording_model()
    calibrated_logits(model, torch.zeros(5, 1, 28, 28, dtype=torch.uint8), batch_size=2, device=torch.device("cpu"))
    assert net.calls == [("reset", None)] * 3
