"""The synthesis option groups' defaults are the command's defaults: conf/synthesize.yaml may only repeat them."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from controversial.config import CONF_DIR
from controversial.synthesis.options import OptimizerOptions, SynthesisOptions


def test_the_yaml_repeats_the_option_groups_defaults_exactly() -> None:
    conf = OmegaConf.load(CONF_DIR / "synthesize.yaml")
    assert OmegaConf.to_container(conf.synthesis) == SynthesisOptions().model_dump()
    optimizer = OmegaConf.to_container(conf.optimizer)
    assert OptimizerOptions.model_validate(optimizer) == OptimizerOptions()
    assert set(optimizer) == set(OptimizerOptions().model_dump(by_alias=True))


def test_the_default_optimizer_is_the_papers_adam() -> None:
    optimizer = OptimizerOptions().factory()([torch.zeros(2, requires_grad=True)])
    assert type(optimizer).__name__ == "Adam"
    assert (optimizer.defaults["lr"], tuple(optimizer.defaults["betas"])) == (0.05, (0.9, 0.999))
