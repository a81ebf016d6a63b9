"""Simulated studies: synthetic model responses and participants generated from a chosen "true" model.

Used to validate the analysis (it must rank the generating model first), to plan studies (see
``power.py``), and as the demonstration run of ``analyze.py`` when no data are given. Simulated
participants rate each category with the true model's probability distorted in logit space by a
per-participant gain and noise level, then quantised to the five-point scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from pydantic import Field, field_validator
from scipy import special

from controversial.analysis.study import Stimulus
from controversial.datasets import DATASETS
from controversial.errors import UserError
from controversial.options import Count, Options, ordered_range
from controversial.records.names import natural_filename, stimulus_filename
from controversial.records.responses import RATING_SCALE, write_human_ratings, write_model_responses


def _by_display_name() -> dict[str, str]:
    """Display name -> dataset name of every dataset known now (built-in or registered), read when simulating so
    that a dataset registered after import (an imported model's folder) can be simulated too."""
    return {info.display_name: name for name, info in DATASETS.items()}


@dataclass(frozen=True)
class SimulatedModels:
    names: tuple[str, ...]
    categories: tuple[str, ...]
    stimuli: tuple[Stimulus, ...]
    probabilities: np.ndarray  # (M, N, K)


@dataclass(frozen=True)
class ParticipantNoise:
    """Per-participant distortion in logit units: sd drawn uniformly from ``sd``, gain from ``gain``."""

    sd: tuple[float, float] = (0.8, 1.6)
    gain: tuple[float, float] = (0.7, 1.3)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def simulate_models(
    n_models: int = 9,
    dataset: str = "MNIST",
    stimuli_per_pair: int = 20,
    natural_per_class: int = 10,
    model_noise: tuple[float, float] = (0.3, 1.0),
    seed: int = 0,
    prefix: str = "sim",
) -> SimulatedModels:
    """Models that share a consensus percept plus model-specific deviations, and PNAS-like stimuli:
    ``stimuli_per_pair`` controversial images per model pair (each class targeted twice per side
    when 20) where model A sees class a and not b and model B the reverse, plus natural images."""
    known = _by_display_name()
    if dataset not in known:
        raise UserError(f"unknown dataset {dataset!r}; allowed: {', '.join(known)}")
    categories = DATASETS[known[dataset]].class_names
    K = len(categories)
    rng = np.random.default_rng(seed)
    names = tuple(f"{prefix}{m + 1}" for m in range(n_models))
    stimuli: list[Stimulus] = []
    for c in range(K):
        for i in range(natural_per_class):
            image = natural_filename(known[dataset], c * natural_per_class + i, categories[c])
            stimuli.append(Stimulus(image, None, None, categories[c]))
    targets: list[tuple[int, int, int, int]] = []
    for A, B in combinations(range(n_models), 2):
        for j in range(stimuli_per_pair):
            a = j % K
            b = (a + ((1 + 4 * ((j // K) % 2)) % K or 1)) % K  # b = a+1 or a+5 (a+1 where a+5 is a)
            image = stimulus_filename(names[A], categories[a], names[B], categories[b], j)
            stimuli.append(Stimulus(image, (names[A], names[B]), (categories[a], categories[b]), None))
            targets.append((A, a, B, b))
    N = len(stimuli)
    n_natural = K * natural_per_class
    consensus = -2.5 + rng.standard_normal((N, K))
    truth = [categories.index(s.true_class) for s in stimuli[:n_natural]]
    consensus[np.arange(n_natural), truth] += 5.0
    for row, (A, a, B, b) in enumerate(targets, start=n_natural):
        consensus[row, [a, b]] += 1.0
    sd = rng.uniform(*model_noise, size=n_models)
    logits = consensus[None] + sd[:, None, None] * rng.standard_normal((n_models, N, K))
    for row, (A, a, B, b) in enumerate(targets, start=n_natural):
        logits[A, row, a], logits[A, row, b] = 3.0 + 0.3 * rng.standard_normal(), -3.0
        logits[B, row, b], logits[B, row, a] = 3.0 + 0.3 * rng.standard_normal(), -3.0
    return SimulatedModels(names, categories, tuple(stimuli), _sigmoid(logits))


def true_probabilities(
    models: SimulatedModels | np.ndarray, names: Sequence[str], weights: Mapping[str, float]
) -> np.ndarray:
    """The generating pattern (N, K): one model's probabilities, or a weighted mixture of several."""
    probabilities = models.probabilities if isinstance(models, SimulatedModels) else np.asarray(models)
    unknown = [m for m in weights if m not in names]
    if unknown or not weights:
        raise UserError(f"unknown true model(s) {unknown}; known: {', '.join(names)}")
    total = sum(weights.values())
    return sum(w / total * probabilities[list(names).index(m)] for m, w in weights.items())


def quantise(values: np.ndarray, scale: Sequence[float] = RATING_SCALE) -> np.ndarray:
    """Round each value to the nearest point of the rating scale."""
    levels = np.asarray(scale, dtype=np.float64)
    return levels[np.abs(values[..., None] - levels).argmin(axis=-1)]


def shared_deviation(probabilities: np.ndarray, sd: float, seed: int | np.random.SeedSequence = 0) -> np.ndarray:
    """(N, K) true probabilities -> (N, K) the percept a simulated population shares: the logit plus a
    deviation N(0, sd^2) drawn once per (stimulus, category) and common to every participant.

    With ``sd > 0`` people deviate from the generating model in the same way, as the paper found for
    every model (all below the lower noise ceiling); pass the result to :func:`simulate_participants`,
    whose gain then scales the deviation with the logit. ``sd = 0`` returns the probabilities.
    """
    if sd < 0:
        raise UserError(f"shared deviation sd must be >= 0, got {sd}")
    if sd == 0:
        return np.asarray(probabilities, dtype=np.float64)
    mean = logit(probabilities)
    return _sigmoid(mean + sd * np.random.default_rng(seed).standard_normal(mean.shape))


def logit(probabilities: np.ndarray) -> np.ndarray:
    """The latent mean of simulated participants (and of the noise fit): logits, clipped at 1e-4 from 0 and 1."""
    return np.log(np.clip(probabilities, 1e-4, 1 - 1e-4) / np.clip(1 - probabilities, 1e-4, 1))


LOGIT_BOUND = float(logit(np.array(1.0)))  # the largest logit :func:`logit` returns: a percept is a probability


def rating_cuts(scale: Sequence[float] | np.ndarray = RATING_SCALE) -> np.ndarray:
    """The latent logits at which :func:`quantise` of the sigmoid moves up a scale point: the logits of the
    midpoints between points. The simulated participants, their expected ratings and the noise fit
    (``noise_fit.py``, an ordered probit with these cut points) all rest on this."""
    levels = np.asarray(scale, dtype=np.float64)
    mids = (levels[1:] + levels[:-1]) / 2
    return np.log(mids / (1 - mids))


def _participants(
    n_participants: int, noise: ParticipantNoise, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Each participant's gain and noise sd, shaped (S, 1, 1); drawn in this order from ``rng``."""
    gain = rng.uniform(*noise.gain, size=(n_participants, 1, 1))
    sd = rng.uniform(*noise.sd, size=(n_participants, 1, 1))
    return gain, sd


def simulate_participants(
    probabilities: np.ndarray,
    n_participants: int,
    noise: ParticipantNoise = ParticipantNoise(),
    scale: Sequence[float] = RATING_SCALE,
    seed: int | np.random.SeedSequence = 0,
    shared_sd: float = 0.0,
) -> np.ndarray:
    """(N, K) true probabilities -> (S, N, K) quantised ratings of simulated participants. ``shared_sd``: each
    percept also deviates by N(0, shared_sd^2) in logit units and stays a probability (its logit clipped as
    :func:`logit` clips), the deviation drawn for each person alone: the marginal of :func:`shared_deviation`'s
    populations, for one person (to share one deviation, pass its percept instead)."""
    rng = np.random.default_rng(seed)
    mean = logit(probabilities)
    gain, sd = _participants(n_participants, noise, rng)
    own = sd * rng.standard_normal((n_participants, *mean.shape))
    if shared_sd > 0:
        mean = np.clip(mean + shared_sd * rng.standard_normal(own.shape), -LOGIT_BOUND, LOGIT_BOUND)
    return quantise(_sigmoid(gain * mean + own), scale)


def expected_ratings(
    probabilities: np.ndarray,
    n_participants: int,
    noise: ParticipantNoise = ParticipantNoise(),
    scale: Sequence[float] = RATING_SCALE,
    seed: int | np.random.SeedSequence = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The same participants as :func:`simulate_participants` with the same seed, but each rating replaced by
    its expectation over the participant's own noise: (S, N, K) E[y] and E[y^2].

    Why: a design optimiser that reads effects off simulated ratings picks the stimuli whose simulated
    ratings happened to favour the truth; these moments carry no such chance. Exact, because rounding
    sigmoid(latent) to the nearest scale point thresholds the Gaussian latent at the logits of the
    midpoints between points.
    """
    rng = np.random.default_rng(seed)
    gain, sd = _participants(n_participants, noise, rng)
    return rating_moments(gain * logit(probabilities)[None], sd, scale)


def shared_moments(
    probabilities: np.ndarray,
    n_participants: int,
    noise: ParticipantNoise,
    shared_sd: float,
    scale: Sequence[float] = RATING_SCALE,
    seed: int | np.random.SeedSequence = 0,
    nodes: int = 24,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The participants of :func:`expected_ratings`, in a population whose percept deviates from the truth by a
    shared N(0, ``shared_sd``^2) logit per (stimulus, category) (:func:`shared_deviation`), the deviation not
    drawn but integrated out: (S, N, K) each rating's mean and mean square over the deviation and the person's
    own noise, and the deviation's share of its variance (the variance over the deviation of the mean over own
    noise). People of one population share that share, so it averages out over stimuli but not over
    participants. ``shared_sd = 0``: :func:`expected_ratings` and zeros.

    Gauss-Hermite quadrature over the deviation with ``nodes`` points, because the percept is a probability: its
    logit is clipped as :func:`logit` clips, so a deviation cannot push a logit the model already holds at the
    clip further out, only back (on a confident model's entries the mean latent moves towards 0 by about 0.4
    shared sd). The clip puts a kink in the integrand, so 24 points get within about 1e-3 of the integral on
    the 0-1 rating scale, not to machine precision.
    """
    if shared_sd < 0:
        raise UserError(f"shared deviation sd must be >= 0, got {shared_sd}")
    rng = np.random.default_rng(seed)
    gain, sd = _participants(n_participants, noise, rng)
    base = logit(probabilities)[None]
    if shared_sd == 0:
        mean, square = rating_moments(gain * base, sd, scale)
        return mean, square, np.zeros_like(mean)
    points, weights = np.polynomial.hermite_e.hermegauss(nodes)
    weights = weights / weights.sum()
    mean = np.zeros((n_participants, *base.shape[1:]))
    square, second = np.zeros_like(mean), np.zeros_like(mean)
    for point, weight in zip(points, weights):
        conditional, conditional_square = rating_moments(
            gain * np.clip(base + shared_sd * point, -LOGIT_BOUND, LOGIT_BOUND), sd, scale
        )
        mean += weight * conditional
        square += weight * conditional_square
        second += weight * conditional * conditional
    return mean, square, np.maximum(second - mean * mean, 0.0)


def rating_moments(
    mean_latent: np.ndarray, sd: np.ndarray, scale: Sequence[float] = RATING_SCALE
) -> tuple[np.ndarray, np.ndarray]:
    """E[y] and E[y^2] of y = the scale point nearest sigmoid(latent), latent ~ N(mean_latent, sd^2)."""
    levels = np.asarray(scale, dtype=np.float64)
    mean = np.full(mean_latent.shape, levels[0])
    square = np.full(mean_latent.shape, levels[0] ** 2)
    for k, cut in enumerate(rating_cuts(levels), start=1):
        above = special.ndtr((mean_latent - cut) / sd)  # P(rating >= levels[k])
        mean += (levels[k] - levels[k - 1]) * above
        square += (levels[k] ** 2 - levels[k - 1] ** 2) * above
    return mean, square


def write_study(
    directory: str | Path, models: SimulatedModels, ratings: np.ndarray, seed: int = 0
) -> tuple[Path, Path]:
    """Write simulated ratings and model responses in the PNAS formats (trial order shuffled per participant)."""
    directory = Path(directory)
    rng = np.random.default_rng(seed)

    def targets(s: Stimulus) -> list[str]:
        if s.targeted_models is None or s.targeted_classes is None:  # a natural image targets nothing
            return ["", "", "", ""]
        return [*s.targeted_models, *s.targeted_classes]

    human_rows = []
    for p, participant in enumerate(ratings):
        order = rng.permutation(len(models.stimuli))
        rts = rng.gamma(4.0, 1.0, size=len(order))
        for trial, n in enumerate(order):
            s = models.stimuli[n]
            for k, category in enumerate(models.categories):
                human_rows.append(
                    [
                        f"sim_participant_{p + 1:02d}",
                        s.image,
                        0,
                        category,
                        *targets(s),
                        float(participant[n, k]),
                        round(0.4 * float(rts[trial]), 3),
                        round(float(rts[trial]), 3),
                        trial,
                    ]
                )
    model_rows = [
        [name, s.image, category, *targets(s), float(models.probabilities[m, n, k])]
        for m, name in enumerate(models.names)
        for n, s in enumerate(models.stimuli)
        for k, category in enumerate(models.categories)
    ]
    human_path, model_path = directory / "human_ratings.csv", directory / "model_responses.csv"
    write_human_ratings(human_path, human_rows)
    write_model_responses(model_path, model_rows)
    return human_path, model_path


class NoiseOptions(Options):
    """How simulated participants rate: a generating model (or mixture) plus per-participant noise and gain."""

    true_model: str = Field("sim3", description="the generating model, or a mixture sim3:0.7+sim5:0.3")
    noise_sd: tuple[float, float] = Field((0.8, 1.6), description="per-participant logit noise range")
    gain: tuple[float, float] = Field((0.7, 1.3), description="per-participant gain range")

    @field_validator("true_model")
    @classmethod
    def _mixture(cls, value: str) -> str:
        parse_mixture(value)
        return value

    _range = field_validator("noise_sd", "gain")(lambda bounds: ordered_range(bounds))


class SimulatedModelsOptions(Options):
    n_models: int = Field(9, ge=2, description="simulated models")
    dataset: str = Field(
        "MNIST",
        description="class names of the simulated stimuli: MNIST | CIFAR10 | a registered dataset's display name",
    )
    stimuli_per_pair: Count = Field(20, description="controversial stimuli per model pair")
    natural_per_class: int = Field(10, ge=0, description="natural images per class")


class SimulatedStudyOptions(SimulatedModelsOptions, NoiseOptions):
    n_participants: int = Field(30, ge=2, description="simulated participants")


def parse_mixture(spec: str) -> dict[str, float]:
    """``"sim3"`` or ``"sim3:0.7+sim5:0.3"`` (``,`` also separates, but needs quoting for Hydra) -> weights."""
    weights = {}
    for part in spec.replace(",", "+").split("+"):
        name, _, weight = part.strip().partition(":")
        try:
            weights[name] = float(weight) if weight else 1.0
        except ValueError:
            raise UserError(f"weight {weight!r} of {name!r} is not a number; use e.g. sim3:0.7+sim5:0.3") from None
        if not name or not weights[name] >= 0:
            raise UserError(f"{part!r} needs a model name and a weight >= 0; use e.g. sim3:0.7+sim5:0.3")
    if sum(weights.values()) <= 0:
        raise UserError("the weights sum to 0; give at least one positive weight")
    return weights
