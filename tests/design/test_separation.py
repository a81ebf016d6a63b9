"""The design criterion against brute force: simulated studies run through the real bootstrap, and exact updates."""

from __future__ import annotations

import numpy as np
import pytest

from controversial.analysis.bootstrap import bootstrap
from controversial.analysis.simulate import ParticipantNoise, shared_deviation, simulate_models, simulate_participants
from controversial.design.noise_fit import NoiseFit, fit_noise, fit_shared_sd
from controversial.design.separation import ReferencePanel, critical_z, softmin


@pytest.fixture(scope="module")
def tiny():
    models = simulate_models(n_models=3, stimuli_per_pair=10, natural_per_class=2, seed=0)
    conditions = [s.condition for s in models.stimuli]
    return models, conditions


def simulated_studies(models, conditions, w, truth, n_participants, shared_sd=0.0, n_studies=30):  # type: ignore[no-untyped-def]
    """Mean over simulated studies (each its own population when ``shared_sd`` > 0, and its own participants),
    analysed by the analysis's bootstrap: the truth's effect over every model and the bootstrap SE of it."""
    P = models.probabilities
    chosen = np.flatnonzero(w)
    effects, ses = [], []
    for k in range(n_studies):
        percept = shared_deviation(P[truth][chosen], shared_sd, seed=200 + k)
        ratings = simulate_participants(percept, n_participants, ParticipantNoise(), seed=100 + k)
        dist = bootstrap(
            ratings, P[:, chosen], models.names, [conditions[i] for i in chosen], 300, seed=k, ceilings=False
        )
        effects.append(dist.estimates[truth] - dist.estimates[: len(P)])
        ses.append((dist.samples[:, [truth]] - dist.samples[:, : len(P)]).std(axis=0))
    return np.mean(effects, axis=0), np.mean(ses, axis=0)


def test_expected_separation_matches_brute_force_bootstrap(tiny):
    """Effect and bootstrap SE predicted for a subset agree with the mean over simulated studies analysed by
    the analysis's own bootstrap (the SE is what its test divides by)."""
    models, conditions = tiny
    P, N = models.probabilities, len(conditions)
    w = (np.random.default_rng(0).random(N) < 0.7).astype(float)
    panel = ReferencePanel(P, conditions, ParticipantNoise(), n_panel=24, seed=0)
    separation = panel.separation(w)
    S, truth = 6, 1
    effects, ses = simulated_studies(models, conditions, w, truth, S)
    rivals = [j for j in range(3) if j != truth]
    predicted_se = separation.effect[truth] / separation.z(S)[truth]
    assert np.allclose(separation.effect[truth, rivals], effects[rivals], rtol=0.08)
    assert np.allclose(predicted_se[rivals], ses[rivals], rtol=0.25)


def test_updates_match_exact_recomputation(tiny):
    """The optimiser's cheap update (exact effect and participant variance, first-order stimulus variance)
    stays within 10 % of recomputing from scratch, even on a 25-stimulus set where one stimulus matters most."""
    models, conditions = tiny
    N = len(conditions)
    plain = ReferencePanel(models.probabilities, conditions, ParticipantNoise(), n_panel=8, seed=1)
    shared = ReferencePanel(models.probabilities, conditions, ParticipantNoise(), n_panel=8, seed=1, shared_sd=1.0)
    w = np.zeros(N)
    w[::2] = 1
    add, remove = np.flatnonzero(w == 0)[:4], np.flatnonzero(w)[:4]
    for panel in (plain, shared):  # the shared deviation's variance is updated exactly, like the own noise's
        for candidates, sign in ((add, 1), (remove, -1)):
            fast = panel.z_after(w, candidates, 10, sign)
            assert fast.shape == (len(candidates), 3, 3)
            for i, n in enumerate(candidates):
                trial = w.copy()
                trial[n] += sign
                exact = panel.separation(trial).z(10)
                assert np.allclose(fast[i], exact, rtol=0.1, equal_nan=True)


def test_participants_needed_is_the_smallest_count_reaching_the_target(tiny):
    models, conditions = tiny
    panel = ReferencePanel(models.probabilities, conditions, ParticipantNoise(sd=(3.0, 4.0)), n_panel=8, seed=2)
    separation = panel.separation(np.ones(len(conditions)))
    needed = separation.participants_needed(0.05, 0.8, 6)
    target = critical_z(0.05, 6) + 0.8416
    for (i, j), n in np.ndenumerate(needed):
        if np.isfinite(n) and n > 2:
            assert separation.z(n)[i, j] >= target - 1e-9 > separation.z(n - 1)[i, j]
    assert np.isnan(separation.z(5)[0, 0]) and np.isinf(needed[0, 0])
    exact = separation.participants_needed(0.05, 0.8, 6, whole=False)
    reachable = np.isfinite(exact)
    np.testing.assert_allclose(separation.z(np.where(reachable, exact, 1.0))[reachable], target, rtol=1e-4)
    np.testing.assert_array_equal(needed[reachable], np.maximum(np.ceil(exact[reachable]), 2))
    assert softmin(np.array([1.0, 5.0, np.nan]), 0.01) == pytest.approx(1.0)


def test_noise_fit_recovers_gain_and_sd(tiny):
    models, _ = tiny
    ratings = simulate_participants(
        models.probabilities[2], 4, ParticipantNoise(sd=(0.6, 0.6), gain=(1.4, 1.4)), seed=3
    )
    fit = fit_noise(ratings, models.probabilities)
    assert fit.reference == 2
    assert np.allclose(fit.gain, 1.4, atol=0.15) and np.allclose(fit.sd, 0.6, atol=0.12)


@pytest.mark.parametrize("shared_sd, own", [(0.0, (1.0, 2.0)), (3.0, (1.0, 2.0)), (3.0, (4.0, 6.0))])
def test_fit_shared_sd_recovers_how_far_people_deviate_together(shared_sd, own):
    """The method of moments on agreement between participants finds the shared deviation that generated the
    ratings (within 15 %; none when there is none), with the own noise left for the rest of the fitted sd."""
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=10, seed=0)
    percept = shared_deviation(models.probabilities[1], shared_sd, seed=5)
    ratings = simulate_participants(percept, 12, ParticipantNoise(sd=own), seed=6)
    fit = fit_noise(ratings, models.probabilities)
    found = fit_shared_sd(ratings, models.probabilities, fit)
    assert fit.reference == 1
    assert found == pytest.approx(shared_sd, abs=0.3, rel=0.15)
    assert fit.noise(found).sd[1] < fit.noise().sd[1]
    with pytest.raises(ValueError, match="at least two participants"):
        fit_shared_sd(ratings[:1], models.probabilities, NoiseFit(fit.reference, fit.gain[:1], fit.sd[:1]))
    with pytest.raises(ValueError, match="ratings of 1 participants, a noise fit of 12"):
        fit_shared_sd(ratings[:1], models.probabilities, fit)


def test_people_who_agree_more_than_any_shared_deviation_explains_get_no_fit():
    """Two people who agree beyond what the noise model allows even with all their fitted noise shared: the moment
    equation has no root, and its bound is no estimate (planned with it, the design benchmark's panel separated no
    pair), so the fit says so rather than return the bound."""
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=10, seed=0)
    ratings = simulate_participants(models.probabilities[1], 2, ParticipantNoise(sd=(20.0, 20.0)), seed=6)
    ratings[1] = ratings[0]
    fit = fit_noise(ratings, models.probabilities)
    with pytest.raises(ValueError, match=r"the 2 participants agree more \(mean r 1.000\) than the noise model"):
        fit_shared_sd(ratings, models.probabilities, fit)


def test_a_participant_who_gives_one_rating_throughout_is_left_out_of_the_shared_fit():
    """A straight-liner agrees with nobody (their r is undefined): the fit uses the others, and says so when fewer
    than two are left rather than fail inside the root finder."""
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=10, seed=0)
    ratings = simulate_participants(shared_deviation(models.probabilities[1], 3.0, seed=5), 6, seed=6)
    fit = fit_noise(ratings, models.probabilities)
    alone = fit_shared_sd(ratings[1:], models.probabilities, NoiseFit(fit.reference, fit.gain[1:], fit.sd[1:]))
    ratings[0] = 0.25
    assert fit_shared_sd(ratings, models.probabilities, fit) == pytest.approx(alone)
    ratings[2:] = 0.25
    with pytest.raises(ValueError, match="of 6, 5 gave one rating throughout"):
        fit_shared_sd(ratings, models.probabilities, fit)


def test_a_participant_the_noise_model_expects_to_give_one_rating_is_left_out_of_both_agreements():
    """Observed and modelled agreement average over the same people: one whose ratings vary but whom the fitted
    noise model expects to give one rating throughout (gain 0, almost no noise) is left out of both, so the fit
    equals the fit without them (before, the observed agreement kept them and the modelled one dropped them)."""
    models = simulate_models(n_models=4, stimuli_per_pair=20, natural_per_class=10, seed=0)
    ratings = simulate_participants(shared_deviation(models.probabilities[1], 3.0, seed=5), 6, seed=6)
    fit = fit_noise(ratings, models.probabilities)
    alone = fit_shared_sd(ratings[1:], models.probabilities, NoiseFit(fit.reference, fit.gain[1:], fit.sd[1:]))
    flat = NoiseFit(fit.reference, np.r_[0.0, fit.gain[1:]], np.r_[0.01, fit.sd[1:]])
    assert fit_shared_sd(ratings, models.probabilities, flat) == pytest.approx(alone)
    unlike = NoiseFit(fit.reference, np.r_[0.0, 0.0, fit.gain[2:]], np.r_[0.01, 0.01, fit.sd[2:]])
    ratings[2:] = 0.25
    with pytest.raises(ValueError, match="of 6, 4 gave one rating throughout and 2 more are fitted"):
        fit_shared_sd(ratings, models.probabilities, unlike)


def test_a_shared_deviation_is_integrated_out_and_matches_studies_that_draw_it(tiny):
    """With people sharing a deviation from the truth, the prediction (the deviation integrated out: expected
    ratings over it, its variance in the stimulus variance) matches simulated studies that each draw a population
    and its participants and are analysed by the analysis's bootstrap; its effect is smaller than the plain
    model's, which would overstate it; and its share of the variance does not shrink with participants."""
    models, conditions = tiny
    P, N = models.probabilities, len(conditions)
    w = (np.random.default_rng(0).random(N) < 0.7).astype(float)
    plain = ReferencePanel(P, conditions, ParticipantNoise(), n_panel=24, seed=0)
    separation = ReferencePanel(P, conditions, ParticipantNoise(), n_panel=24, seed=0, shared_sd=2.0).separation(w)
    assert separation.truths == (0, 1, 2) and separation.effect.shape == (3, 3)
    S, truth = 6, 1
    effects, ses = simulated_studies(models, conditions, w, truth, S, shared_sd=2.0)
    rivals = [j for j in range(3) if j != truth]
    predicted_se = separation.effect[truth] / separation.z(S)[truth]
    assert np.allclose(separation.effect[truth, rivals], effects[rivals], rtol=0.1)
    assert np.allclose(predicted_se[rivals], ses[rivals], rtol=0.25)
    assert (separation.effect[truth, rivals] < plain.separation(w).effect[truth, rivals]).all()
    assert (separation.stimulus_var_limit[truth, rivals] > plain.separation(w).stimulus_var_limit[truth, rivals]).all()
