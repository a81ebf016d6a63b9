"""How many participants are needed to tell the top two models apart?

Monte Carlo power analysis: for an assumed generating pattern (a candidate model or a mixture),
simulate studies with n participants on the given stimulus set, run the same bootstrap test as
the analysis (participants x stimuli, stratified; Holm-Sidak over all pairs of models plus the
lower ceiling, or one planned comparison), and count how often the expected best model is
significantly above the expected runner-up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from controversial.analysis.bootstrap import LOWER, bootstrap, pairwise_tests
from controversial.analysis.correlation import participant_model_correlations
from controversial.analysis.simulate import ParticipantNoise, simulate_participants
from controversial.errors import UserError

log = logging.getLogger(__name__)

Correction = Literal["holm-sidak", "none"]


@dataclass(frozen=True)
class PowerCurve:
    top_two: tuple[str, str]
    expected_r: dict[str, float]  # mean r of each model in a large simulated reference panel
    n_participants: tuple[int, ...]
    power: tuple[float, ...]
    monte_carlo_se: tuple[float, ...]
    required: int | None  # smallest n reaching target_power, None if none did
    target_power: float
    alpha: float
    correction: str
    n_simulations: int
    n_resamples: int


def power_curve(
    probabilities: np.ndarray,
    names: Sequence[str],
    conditions: Sequence[str],
    truth: np.ndarray,
    participant_counts: Sequence[int] = (5, 10, 15, 20, 30, 40, 60),
    noise: ParticipantNoise = ParticipantNoise(),
    n_simulations: int = 50,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    target_power: float = 0.8,
    correction: Correction = "holm-sidak",
    reference_participants: int = 200,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> PowerCurve:
    """Power to separate the top two models, per number of participants.

    ``truth`` (N, K) generates the simulated ratings; the top two models are those with the highest
    mean r in a reference panel of ``reference_participants`` simulated participants.
    """
    if correction not in ("holm-sidak", "none"):
        raise UserError(f"unknown correction {correction!r}; allowed: holm-sidak, none")
    if min(participant_counts) < 2:
        raise UserError("participant_counts must all be >= 2 (a noise ceiling needs two participants)")
    names = tuple(names)
    seeds = np.random.SeedSequence(seed).spawn(1 + len(participant_counts) * n_simulations)
    panel = simulate_participants(truth, reference_participants, noise, seed=seeds[0])
    expected = participant_model_correlations(panel, probabilities).mean(axis=0)
    order = np.argsort(-expected)
    best, second = names[order[0]], names[order[1]]
    powers, errors = [], []
    for i, n in enumerate(participant_counts):
        hits = 0
        for j in range(n_simulations):
            ratings = simulate_participants(truth, n, noise, seed=seeds[1 + i * n_simulations + j])
            child_seed = int(seeds[1 + i * n_simulations + j].generate_state(1)[0])
            if correction == "none":
                dist = bootstrap(ratings, probabilities, names, conditions, n_resamples, child_seed, ceilings=False)
                tests = pairwise_tests(dist, include=[best, second], alpha=alpha)
                p, above = (
                    tests.p_two_tailed[0, 1],
                    dist.estimates[names.index(best)] > dist.estimates[names.index(second)],
                )
                hits += bool(p < alpha and above)
            else:
                dist = bootstrap(ratings, probabilities, names, conditions, n_resamples, child_seed)
                tests = pairwise_tests(dist, include=[*names, LOWER], alpha=alpha)
                hits += int(tests.significance[names.index(best), names.index(second)] == 1)
        power = hits / n_simulations
        powers.append(power)
        errors.append(float(np.sqrt(power * (1 - power) / n_simulations)))
        log.info("%d participants: power %.2f", n, power)
        if progress is not None:
            progress(n, power)
    required = next((n for n, p in zip(participant_counts, powers) if p >= target_power), None)
    return PowerCurve(
        (best, second),
        dict(zip(names, expected.tolist())),
        tuple(participant_counts),
        tuple(powers),
        tuple(errors),
        required,
        target_power,
        alpha,
        correction,
        n_simulations,
        n_resamples,
    )
