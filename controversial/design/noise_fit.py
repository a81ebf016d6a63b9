"""Fit the simulated-participant noise model to real ratings (a pilot, or an adaptive study's first batch).

The model (``simulate.py``): rating = quantise(sigmoid(g * logit(p) + sd * eps)). Quantising a
sigmoid to the scale's nearest level is thresholding the latent logit at the logits of the
midpoints between levels, so given a reference pattern p this is an ordered-probit model with known
cut points; each participant's (gain, sd) is its maximum-likelihood fit. The reference pattern is
the model that predicts the ratings best (or one given): when it is not the truth, the misfit shows
up as extra noise, so the fitted noise is conservative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import brentq, minimize
from scipy.special import log_ndtr

from controversial.analysis.correlation import participant_model_correlations
from controversial.analysis.simulate import LOGIT_BOUND, ParticipantNoise, logit, rating_cuts, rating_moments
from controversial.errors import UserError
from controversial.records.responses import RATING_SCALE


@dataclass(frozen=True)
class NoiseFit:
    reference: int  # index of the model whose logits served as the latent mean
    gain: np.ndarray  # (S,)
    sd: np.ndarray  # (S,)

    def noise(self, shared_sd: float = 0.0) -> ParticipantNoise:
        """The ranges the planning simulations draw from: the fitted participants' min to max. With a shared
        deviation planned for (``fit_shared_sd``), each person's own sd is what remains of the fitted one, which
        holds both: own^2 = sd^2 - (gain x shared_sd)^2."""
        sd = own_sd(self.sd, self.gain, shared_sd)
        return ParticipantNoise(
            sd=(float(sd.min()), float(sd.max())), gain=(float(self.gain.min()), float(self.gain.max()))
        )


def own_sd(sd: np.ndarray, gain: np.ndarray, shared_sd: float) -> np.ndarray:
    """Each fitted sd less a shared deviation's part, sqrt(sd^2 - (gain x shared_sd)^2), kept at 5 % of sd or more."""
    return np.sqrt(np.maximum(sd**2 - (gain * shared_sd) ** 2, (0.05 * sd) ** 2))


def _log_likelihood(levels: np.ndarray, latent: np.ndarray, cuts: np.ndarray, gain: float, sd: float) -> float:
    upper = np.append(cuts, np.inf)[levels]
    lower = np.insert(cuts, 0, -np.inf)[levels]
    mu = gain * latent
    hi, lo = (upper - mu) / sd, (lower - mu) / sd
    # log(Phi(hi) - Phi(lo)), computed on the tail that keeps precision
    log_hi, log_lo = log_ndtr(hi), log_ndtr(lo)
    with np.errstate(divide="ignore"):
        body = log_hi + np.log1p(-np.exp(np.minimum(log_lo - log_hi, -1e-12)))
        flipped = log_ndtr(-lo) + np.log1p(-np.exp(np.minimum(log_ndtr(-hi) - log_ndtr(-lo), -1e-12)))
    return float(
        np.where(mu > 0.5 * (np.nan_to_num(lower, neginf=-1e9) + np.nan_to_num(upper, posinf=1e9)), flipped, body).sum()
    )


def fit_noise(
    human: np.ndarray, model: np.ndarray, reference: int | None = None, scale: Sequence[float] = RATING_SCALE
) -> NoiseFit:
    """Per-participant (gain, sd) from (S, N, K) ratings and (M, N, K) model probabilities."""
    human = np.asarray(human, dtype=np.float64)
    model = np.asarray(model, dtype=np.float64)
    if reference is None:
        reference = int(np.argmax(participant_model_correlations(human, model).mean(axis=0)))
    points = np.asarray(scale, dtype=np.float64)
    cuts = rating_cuts(scale)
    latent = logit(model[reference]).ravel()
    gains, sds = [], []
    for ratings in human:
        levels = np.abs(ratings.ravel()[:, None] - points).argmin(axis=1)
        result = minimize(
            lambda x: -_log_likelihood(levels, latent, cuts, x[0], float(np.exp(x[1]))),
            np.array([1.0, 0.0]),
            method="Nelder-Mead",
            options={"xatol": 1e-3, "fatol": 1e-3},
        )
        gains.append(result.x[0])
        sds.append(float(np.exp(result.x[1])))
    return NoiseFit(reference, np.array(gains), np.array(sds))


VARIANCE_FLOOR = 1e-8  # a rating variance below this (sd 1e-4 on the rating scale) is a single rating throughout


def _rating_variance(mean_latent: np.ndarray, sd: np.ndarray, scale: Sequence[float]) -> np.ndarray:
    """(P,) each participant's expected variance of their ratings over all entries, for latent means (P, E)."""
    mean, square = rating_moments(mean_latent, sd, scale)
    return square.mean(axis=1) - mean.mean(axis=1) ** 2


def fit_shared_sd(
    human: np.ndarray,
    model: np.ndarray,
    fit: NoiseFit,
    scale: Sequence[float] = RATING_SCALE,
    nodes: int = 24,
) -> float:
    """The sd (logit units) of a deviation from the reference model that the participants share
    (``simulate.shared_deviation``; ``plan.shared_sd``), by the method of moments: the value at which the
    noise model's expected agreement between two participants (their Pearson r over all entries, averaged over
    pairs) equals the ratings' own.

    Why this statistic: own noise makes people disagree, a shared deviation makes them agree in ways the
    reference model does not predict, and the fitted sd (``fit_noise``) holds both, sd^2 = own^2 + (gain x
    shared)^2; so for a candidate shared sd each person keeps the rest as own noise and the agreement follows.
    The expected r is integrated over the deviation (Gauss-Hermite, as ``simulate.shared_moments``).
    Both averages cover the same participants: those whose ratings vary and whom the fitted noise model expects
    to vary (one who gives a single rating throughout, or whom it fits with a gain near 0 and little noise,
    agrees with nobody and is left out). Returns 0 when people agree no more than the reference model explains;
    a ValueError when fewer than two participants are left to compare, or when they agree more than any shared
    deviation explains: the moment equation has no root, and its bound (all fitted noise shared) is no estimate.
    Planned with that bound (67 logits, two simulated people of the design benchmark's noisier population), the
    reference panel separated no pair of models and the design search chose blind.
    """
    human = np.asarray(human, dtype=np.float64)
    flat = human.reshape(human.shape[0], -1)
    if len(flat) != len(fit.gain):
        raise UserError(f"fit_shared_sd: ratings of {len(flat)} participants, a noise fit of {len(fit.gain)}")
    latent = logit(np.asarray(model, dtype=np.float64)[fit.reference]).ravel()
    points, weights = np.polynomial.hermite_e.hermegauss(nodes)
    weights = weights / weights.sum()
    varies = flat.std(axis=1) > 0
    expected_to_vary = _rating_variance(fit.gain[:, None] * latent, fit.sd[:, None], scale) > VARIANCE_FLOOR
    if (varies & expected_to_vary).sum() < 2:
        raise UserError(
            f"fit_shared_sd needs at least two participants whose ratings vary and whom the fitted noise model "
            f"expects to vary; of {len(flat)}, {int((~varies).sum())} gave one rating throughout and "
            f"{int((varies & ~expected_to_vary).sum())} more are fitted with too little gain and noise to vary"
        )
    keep = varies & expected_to_vary
    r = np.corrcoef(flat[keep])
    observed = float(r[np.triu_indices(len(r), 1)].mean())
    gain, sd, signed_gain = np.abs(fit.gain[keep])[:, None], fit.sd[keep][:, None], fit.gain[keep]

    def agreement(shared: float) -> float:
        own = own_sd(sd, gain, shared)
        first = np.zeros((len(gain), len(latent)))
        square = np.zeros_like(first)
        cross = np.zeros((len(gain), len(gain)))
        for point, weight in zip(points, weights):
            mean_latent = signed_gain[:, None] * np.clip(latent + shared * point, -LOGIT_BOUND, LOGIT_BOUND)
            mean, second = rating_moments(mean_latent, own, scale)
            first += weight * mean
            square += weight * second
            cross += weight * (mean @ mean.T) / len(latent)
        centre = first.mean(axis=1)
        covariance = cross - np.outer(centre, centre)
        variance = np.maximum(square.mean(axis=1) - centre**2, VARIANCE_FLOOR)
        expected = covariance / np.sqrt(np.outer(variance, variance))
        return float(expected[np.triu_indices(len(expected), 1)].mean())

    high = float(np.min(sd[:, 0] / np.maximum(gain[:, 0], 1e-6)))
    if agreement(0.0) >= observed:
        return 0.0
    most = agreement(high)
    if most <= observed:
        raise UserError(
            f"the {int(keep.sum())} participants agree more (mean r {observed:.3f}) than the noise model allows even "
            f"with all of their fitted noise shared (shared sd {high:.1f}: r {most:.3f}), so no shared deviation "
            "fits; with few participants this is chance"
        )
    return float(brentq(lambda s: agreement(s) - observed, 0.0, high, xtol=0.01))
