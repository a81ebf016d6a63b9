"""The synthesis option groups' defaults are the paper's procedure (they are the command's defaults)."""

from __future__ import annotations

import torch

from controversial.synthesis.options import OptimizerOptions, SynthesisOptions


def test_the_default_optimizer_is_the_papers_adam() -> None:
    optimizer = OptimizerOptions().factory()([torch.zeros(2, requires_grad=True)])
    assert type(optimizer).__name__ == "Adam"
    assert (optimizer.defaults["lr"], tuple(optimizer.defaults["betas"])) == (0.05, (0.9, 0.999))


def test_the_default_objective_and_acceptance_are_the_papers() -> None:
    options = SynthesisOptions()
    assert (options.objective, options.sharpness, options.threshold, options.parametrization) == (
        "lse",
        1.0,
        0.75,
        "pixel",
    )
