"""Power analysis: monotone in participants on a clear case, and the task end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_task

from controversial.analysis.power import power_curve
from controversial.analysis.simulate import simulate_models, true_probabilities


def test_power_grows_with_participants_and_finds_the_top_two():
    models = simulate_models(n_models=4, stimuli_per_pair=10, natural_per_class=2, seed=0)
    truth = true_probabilities(models, models.names, {"sim2": 0.55, "sim4": 0.45})
    conditions = [s.condition for s in models.stimuli]
    curve = power_curve(
        models.probabilities,
        models.names,
        conditions,
        truth,
        (2, 12),
        n_simulations=8,
        n_resamples=200,
        correction="none",
        reference_participants=50,
        seed=1,
    )
    assert curve.top_two == ("sim2", "sim4")
    assert curve.power[0] <= curve.power[1]
    assert curve.monte_carlo_se == pytest.approx([(p * (1 - p) / 8) ** 0.5 for p in curve.power])  # binomial SE
    with pytest.raises(ValueError, match="correction"):
        power_curve(models.probabilities, models.names, conditions, truth, (3,), correction="bonferroni")


def test_required_is_the_smallest_count_that_reaches_the_target_power():
    models = simulate_models(n_models=4, stimuli_per_pair=10, natural_per_class=2, seed=0)
    truth = true_probabilities(models, models.names, {"sim2": 0.7, "sim4": 0.3})
    conditions = [s.condition for s in models.stimuli]

    def curve(target: float):
        return power_curve(
            models.probabilities,
            models.names,
            conditions,
            truth,
            (2, 12),
            n_simulations=8,
            n_resamples=200,
            correction="none",
            reference_participants=50,
            seed=1,
            target_power=target,
        )

    reached = curve(0.8)
    assert reached.power == (0.875, 1.0) and reached.required == 2
    assert curve(0.95).required == 12 and curve(1.01).required is None


def test_power_task_writes_report(tmp_path):
    overrides = [
        "participant_counts=[3,6]",
        "n_simulations=3",
        "n_resamples=100",
        "reference_participants=20",
        "simulate.n_models=3",
        "simulate.stimuli_per_pair=10",
        "simulate.natural_per_class=2",
        "true_model=sim1:0.6+sim3:0.4",
    ]
    result = run_task("power", overrides, tmp_path)
    saved = json.loads((tmp_path / "power.json").read_text())
    assert saved["n_participants"] == [3, 6] and saved["true_model"] == {"sim1": 0.6, "sim3": 0.4}
    assert np.isclose(saved["power"], result["power"]).all()
    assert "| participants | power |" in (tmp_path / "power.md").read_text()
    assert (tmp_path / "power.png").stat().st_size > 1000
