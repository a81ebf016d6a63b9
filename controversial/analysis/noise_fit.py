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
from scipy.optimize import minimize
from scipy.special import log_ndtr

from controversial.analysis.correlation import participant_model_correlations
from controversial.records.responses import RATING_SCALE
from controversial.analysis.simulate import ParticipantNoise, logit, rating_cuts


@dataclass(frozen=True)
class NoiseFit:
    reference: int  # index of the model whose logits served as the latent mean
    gain: np.ndarray  # (S,)
    sd: np.ndarray  # (S,)

    def noise(self) -> ParticipantNoise:
        """The ranges the planning simulations draw from: the fitted participants' min to max."""
        return ParticipantNoise(
            sd=(float(self.sd.min()), float(self.sd.max())), gain=(float(self.gain.min()), float(self.gain.max()))
        )


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
    scale = np.asarray(scale, dtype=np.float64)
    cuts = rating_cuts(scale)
    latent = logit(model[reference]).ravel()
    gains, sds = [], []
    for ratings in human:
        levels = np.abs(ratings.ravel()[:, None] - scale).argmin(axis=1)
        result = minimize(
            lambda x: -_log_likelihood(levels, latent, cuts, x[0], float(np.exp(x[1]))),
            np.array([1.0, 0.0]),
            method="Nelder-Mead",
            options={"xatol": 1e-3, "fatol": 1e-3},
        )
        gains.append(result.x[0])
        sds.append(float(np.exp(result.x[1])))
    return NoiseFit(reference, np.array(gains), np.array(sds))
