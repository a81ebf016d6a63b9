"""``python power.py``: participants needed to separate the top two models at alpha (Monte Carlo)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from controversial.analysis import figures
from controversial.analysis.power import power_curve
from controversial.analysis.simulate import (
    NoiseOptions,
    ParticipantNoise,
    SimulatedModelsOptions,
    parse_mixture,
    simulate_models,
    true_probabilities,
)
from controversial.analysis.study import stimulus_set
from controversial.atomic import atomic_write_text
from controversial.options import Count, Seed
from controversial.records.responses import read_model_responses
from controversial.tasks import Invocation

log = logging.getLogger(__name__)


class PowerSettings(NoiseOptions):
    model_responses: str | None = Field(None, description="PNAS model-format CSV; null: a SIMULATED stimulus set")
    true_model: str = Field(
        "sim3:0.52+sim5:0.48", description="the assumed generating model, or a mixture sim3:0.7+sim5:0.3"
    )
    participant_counts: list[Annotated[int, Field(ge=2)]] = Field(
        default_factory=lambda: [5, 10, 15, 20, 30, 40, 60], min_length=1, description="participant counts to try"
    )
    n_simulations: Count = Field(40, description="simulated studies per participant count")
    n_resamples: Count = Field(1000, description="bootstrap resamples per simulated study")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level")
    target_power: float = Field(0.8, gt=0, lt=1, description="the power to reach")
    correction: Literal["holm-sidak", "none"] = Field("holm-sidak", description="multiple-comparison correction")
    reference_participants: int = Field(200, ge=2, description="simulated panel that picks the top two models")
    seed: Seed = 0
    simulate: SimulatedModelsOptions = Field(default_factory=SimulatedModelsOptions)


def run(cfg: PowerSettings, invocation: Invocation) -> dict:
    """The power curve into ``invocation.out_dir``: power.json, power.md and power.png."""
    out = invocation.out_dir
    if cfg.model_responses is None:
        sim = cfg.simulate
        models = simulate_models(
            int(sim.n_models),
            str(sim.dataset),
            int(sim.stimuli_per_pair),
            int(sim.natural_per_class),
            seed=int(cfg.seed),
        )
        names, stimuli, probabilities = models.names, models.stimuli, models.probabilities
        source = f"SIMULATED stimulus set and models ({len(names)} models, {len(stimuli)} stimuli)"
        log.warning("no model_responses given: planning for a SIMULATED stimulus set")
    else:
        path = Path(cfg.model_responses)
        study = stimulus_set(read_model_responses(path))
        names, stimuli, probabilities = study.models, study.stimuli, study.model
        source = f"{path} ({len(names)} models, {len(stimuli)} stimuli)"
    weights = parse_mixture(str(cfg.true_model))
    truth = true_probabilities(probabilities, names, weights)
    noise = ParticipantNoise(sd=cfg.noise_sd, gain=cfg.gain)

    def progress(n: int, power: float) -> None:
        print(f"  {n:>4} participants: power {power:.2f}", flush=True)

    curve = power_curve(
        probabilities,
        names,
        [s.condition for s in stimuli],
        truth,
        tuple(cfg.participant_counts),
        noise,
        int(cfg.n_simulations),
        int(cfg.n_resamples),
        float(cfg.alpha),
        float(cfg.target_power),
        cfg.correction,
        int(cfg.reference_participants),
        int(cfg.seed),
        progress,
    )
    result = {
        "source": source,
        "true_model": weights,
        "noise_sd": list(cfg.noise_sd),
        "gain": list(cfg.gain),
        **asdict(curve),
    }
    atomic_write_text(out / "power.json", json.dumps(result, indent=1) + "\n")
    figures.power_plot(
        list(curve.n_participants),
        list(curve.power),
        list(curve.monte_carlo_se),
        curve.target_power,
        out / "power.png",
        f"{curve.top_two[0]} vs {curve.top_two[1]} ({curve.correction}, alpha {curve.alpha})",
    )
    lines = [
        f"# Power: {curve.top_two[0]} vs {curve.top_two[1]}",
        "",
        f"- stimuli and models: {source}",
        f"- assumed generating pattern: {cfg.true_model}; participant logit noise sd {list(cfg.noise_sd)}, "
        f"gain {list(cfg.gain)}",
        f"- test: participant x stimulus bootstrap, {curve.n_resamples} resamples, correction {curve.correction}, "
        f"alpha {curve.alpha}; {curve.n_simulations} simulated studies per row",
        "",
        "| participants | power | Monte Carlo SE |",
        "|---|---|---|",
    ]
    lines += [
        f"| {n} | {p:.2f} | {e:.2f} |" for n, p, e in zip(curve.n_participants, curve.power, curve.monte_carlo_se)
    ]
    verdict = (
        f"**{curve.required} participants** reach power {curve.target_power:g}."
        if curve.required is not None
        else f"No tested count reached power {curve.target_power:g}; try larger participant_counts."
    )
    lines += ["", verdict, "", "![power](power.png)", ""]
    atomic_write_text(out / "power.md", "\n".join(lines))
    print(
        f"top two (expected mean r): {curve.top_two[0]} {curve.expected_r[curve.top_two[0]]:.3f}, "
        f"{curve.top_two[1]} {curve.expected_r[curve.top_two[1]]:.3f}"
    )
    print(verdict.replace("**", ""))
    print(f"report: {out / 'power.md'}")
    return result
