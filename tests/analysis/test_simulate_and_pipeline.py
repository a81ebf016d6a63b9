"""Simulated studies: the analysis must recover the generating model."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

from controversial.analysis.ceilings import noise_ceiling
from controversial.analysis.correlation import participant_model_correlations
from controversial.analysis.options import AnalysisOptions
from controversial.analysis.pipeline import analyze_ratings_consistency, analyze_study
from controversial.analysis.simulate import (
    ParticipantNoise,
    expected_ratings,
    quantise,
    rating_cuts,
    shared_deviation,
    shared_moments,
    simulate_models,
    simulate_participants,
    true_probabilities,
    write_study,
)
from controversial.analysis.study import build_study
from controversial.records.responses import RATING_SCALE, read_human_ratings, read_model_responses

FAST = AnalysisOptions(
    bootstrap={"n_resamples": 500, "subset_resamples": 200, "other_subset_resamples": 0},
    error_consistency={"n_resamples": 50, "null_band_grid": 30, "null_band_repeats": 2},
)


def test_quantise_to_the_five_point_scale():
    np.testing.assert_array_equal(quantise(np.array([0.0, 0.1, 0.13, 0.6, 0.99])), [0.0, 0.0, 0.25, 0.5, 1.0])


def test_expected_ratings_are_the_mean_and_mean_square_of_the_same_participants_ratings():
    """Same seed, same participants: averaging many redraws of each participant's own noise (their gain and sd
    fixed, as the seed fixes them) converges to ``expected_ratings``; a participant's drawn ratings scatter
    around it."""
    truth = np.random.default_rng(0).uniform(0.0, 1.0, (40, 10))
    noise = ParticipantNoise(sd=(1.0, 3.0))
    mean, square = expected_ratings(truth, 3, noise, seed=4)
    assert mean.shape == square.shape == (3, 40, 10)
    assert np.all(square >= mean**2 - 1e-12) and np.all((mean >= 0) & (mean <= 1))
    rng = np.random.default_rng(4)  # the participants' draws, in simulate_participants' order
    gain, sd = rng.uniform(*noise.gain, (3, 1, 1)), rng.uniform(*noise.sd, (3, 1, 1))
    logit = np.log(truth / (1 - truth))
    latent = gain * logit + sd * np.random.default_rng(1).standard_normal((4000, 3, 40, 10))
    redraws = quantise(1 / (1 + np.exp(-latent)))
    se = 0.5 / np.sqrt(4000)
    assert np.abs(redraws.mean(axis=0) - mean).max() < 5 * se
    assert np.abs((redraws**2).mean(axis=0) - square).max() < 5 * se
    drawn = simulate_participants(truth, 3, noise, seed=4)
    assert abs(float((drawn - mean).mean())) < 0.02


def test_shared_moments_integrate_the_population_deviation_out():
    """The same participants in many populations, each with its own draw of the shared deviation: their ratings'
    mean and mean square over populations and own noise are ``shared_moments``' first two, and the variance over
    populations of each rating's mean over own noise (``expected_ratings`` of the drawn percept) is its third.
    With no deviation it is ``expected_ratings`` and a zero variance."""
    truth = np.random.default_rng(0).uniform(0.02, 0.98, (30, 10))
    noise = ParticipantNoise(sd=(1.0, 2.0))
    mean, square, shared = shared_moments(truth, 3, noise, 2.0, seed=4)
    percepts = [shared_deviation(truth, 2.0, seed=100 + k) for k in range(1500)]
    conditional = np.array([expected_ratings(p, 3, noise, seed=4) for p in percepts])  # (draws, 2, S, N, K)
    se = 0.5 / np.sqrt(len(percepts))
    assert np.abs(conditional[:, 0].mean(axis=0) - mean).max() < 5 * se
    assert np.abs(conditional[:, 1].mean(axis=0) - square).max() < 5 * se
    assert np.abs(conditional[:, 0].var(axis=0) - shared).max() < 0.01 and shared.mean() > 0.02
    assert np.all(square - mean**2 >= shared - 1e-12)  # the deviation's share is part of the whole variance
    plain, plain_square, none = shared_moments(truth, 3, noise, 0.0, seed=4)
    np.testing.assert_array_equal(np.stack([plain, plain_square]), expected_ratings(truth, 3, noise, seed=4))
    assert not none.any()


def test_shared_moments_clip_the_percept_as_the_simulation_does():
    """A model certain of an entry holds its logit at the clip, so a shared deviation can only move it back: the
    mean rating falls further than a Gaussian latent of the combined variance says (about 0.01 here, on the 0-1
    scale), and ``shared_moments`` follows the simulated populations there."""
    truth = np.full((1, 4), 1 - 1e-7)
    noise = ParticipantNoise(sd=(4.0, 6.0))
    mean, _, _ = shared_moments(truth, 3, noise, 6.0, seed=4)
    draws = [expected_ratings(shared_deviation(truth, 6.0, seed=k), 3, noise, seed=4)[0] for k in range(40000)]
    rng = np.random.default_rng(4)  # the participants' gain and sd, in the order every simulation draws them
    gain, sd = rng.uniform(*noise.gain, (3, 1, 1)), rng.uniform(*noise.sd, (3, 1, 1))
    latent, spread = gain * np.log((1 - 1e-4) / 1e-4), np.sqrt(sd**2 + (gain * 6.0) ** 2)
    steps = np.diff(RATING_SCALE)
    unclipped = RATING_SCALE[0] + sum(step * ndtr((latent - cut) / spread) for step, cut in zip(steps, rating_cuts()))
    assert abs(float(np.mean(draws) - mean.mean())) < 0.003
    assert float(unclipped.mean() - mean.mean()) > 0.005


def test_simulated_stimuli_follow_the_pnas_design():
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=3, seed=0)
    assert models.probabilities.shape == (4, 30 + 6 * 20, 10)
    pair = [s for s in models.stimuli if s.targeted_models == ("sim1", "sim2")]
    assert len(pair) == 20
    # Every class is model A's target exactly twice and model B's target exactly twice.
    assert sorted(s.targeted_classes[0] for s in pair) == sorted([str(k) for k in range(10)] * 2)
    assert sorted(s.targeted_classes[1] for s in pair) == sorted([str(k) for k in range(10)] * 2)
    assert all(a != b for a, b in (s.targeted_classes for s in pair))


@pytest.mark.parametrize("true_model", ["sim2", "sim4"])
def test_analysis_ranks_the_generating_model_first(tmp_path, true_model):
    models = simulate_models(n_models=5, stimuli_per_pair=10, natural_per_class=3, seed=1)
    ratings = simulate_participants(true_probabilities(models, models.names, {true_model: 1.0}), 8, seed=2)
    assert set(np.unique(ratings)) <= set(RATING_SCALE)
    human_path, model_path = write_study(tmp_path, models, ratings, seed=3)
    study = build_study(read_human_ratings(human_path), read_model_responses(model_path))
    results = analyze_study(study, FAST)
    assert results.ranking[0] == true_model
    tests = results.prediction["all"].bootstrap.pairwise
    row = tests.names.index(true_model)
    assert all(tests.significance[row][tests.names.index(m)] == 1 for m in models.names if m != true_model)
    ec = analyze_ratings_consistency(study, FAST)
    assert ec.natural is not None and ec.controversial is not None


def test_mixture_of_models_generates_an_intermediate_pattern():
    models = simulate_models(n_models=3, stimuli_per_pair=10, natural_per_class=2, seed=0)
    mix = true_probabilities(models, models.names, {"sim1": 1.0, "sim3": 1.0})
    np.testing.assert_allclose(mix, (models.probabilities[0] + models.probabilities[2]) / 2)
    ratings = simulate_participants(mix, 10, seed=0)
    r = participant_model_correlations(ratings, models.probabilities).mean(axis=0)
    assert r[1] < min(r[0], r[2])
    with pytest.raises(ValueError, match="unknown true model"):
        true_probabilities(models, models.names, {"nope": 1.0})


def test_a_shared_deviation_puts_the_generating_model_below_the_lower_noise_ceiling():
    """Without it the generating model is as good as the participants' consensus (the ceiling); with it
    people agree with each other more than with any model, as in the paper, and the model still leads."""
    models = simulate_models(n_models=3, stimuli_per_pair=20, natural_per_class=10, seed=0)
    truth = models.probabilities[1]
    np.testing.assert_array_equal(shared_deviation(truth, 0.0), truth)
    gaps = {}
    for sd in (0.0, 2.0):
        ratings = simulate_participants(shared_deviation(truth, sd, seed=7), 20, seed=8)
        r = participant_model_correlations(ratings, models.probabilities).mean(axis=0)
        assert np.argmax(r) == 1
        gaps[sd] = r[1] - noise_ceiling(ratings).lower
    assert gaps[0.0] > -0.01 and gaps[2.0] < -0.05
    with pytest.raises(ValueError, match="sd must be >= 0"):
        shared_deviation(truth, -1.0)
