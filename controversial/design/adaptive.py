"""The next batch of an adaptive study: refit the noise model and the evidence, then re-design.

After a batch, (1) the participant noise model is refitted to every rating collected so far
(``noise_fit``), (2) the evidence about the truth is the pooled bootstrap of the batches so far: a
model stays a candidate truth unless it is significantly below the leader (one-sided, uncorrected,
``screen_alpha``: a screen, not the final test), and (3) the next batch's stimuli maximise the
weakest separation between the remaining candidate truths and every rival. The final analysis pools
all batches as replications (``analyze.py``; ``analysis.bootstrap.pooled_bootstrap``); the screen only
decides where to spend the next participants.

An interim look (``interim_alpha`` > 0, preregistered) may also stop the study: when the analysis's own test
at ``interim_alpha`` already puts one model above every other (``confirmed_best``), no further batch is run. Each
look spends its ``interim_alpha`` out of the study's family-wise alpha and the final test gets the rest
(``final_alpha``): by the union bound over looks, the chance that any look declares a wrong winner stays within
the study's alpha, whatever the looks' dependence and however the later batches were chosen.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

from controversial.analysis.bootstrap import LOWER, Distributions, pairwise_tests, pooled_bootstrap
from controversial.analysis.simulate import ParticipantNoise
from controversial.design.constraints import DesignConstraints, Pool
from controversial.design.noise_fit import NoiseFit, fit_noise, fit_shared_sd
from controversial.design.optimiser import Design, select_design
from controversial.design.options import AdaptiveSettings
from controversial.design.separation import ReferencePanel
from controversial.errors import UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """One batch's first presentations: (S_b, N_b, K) ratings, (M, N_b, K) model probabilities, (N_b,) conditions."""

    human: np.ndarray
    model: np.ndarray
    conditions: Sequence[str]


@dataclass(frozen=True)
class Evidence:
    """What the batches so far say: the candidate truths, the fitted noise, the pooled mean r."""

    candidates: tuple[int, ...]  # model indices still plausible as the truth
    noise: NoiseFit
    estimates: np.ndarray  # (M,) pooled mean r so far
    shared_sd: float = 0.0  # the deviation from the leader the participants share (``fit_shared_sd``); nan: unfit
    confirmed: int | None = None  # the model above every other at the interim look's alpha (``confirmed_best``)

    def planned_noise(self, shared_sd: float | Literal["fit"]) -> tuple[ParticipantNoise, float]:
        """The noise model a next batch is planned with and the shared deviation it plans for: ``shared_sd``, or
        "fit": the one the batches so far show. The fitted own noise keeps what that deviation does not explain."""
        shared = self.shared_sd if shared_sd == "fit" else float(shared_sd)
        if np.isnan(shared):
            raise UserError(
                "shared_sd=fit: the batches so far give no shared deviation to fit (each needs two participants "
                "whose ratings vary and who agree no more than some shared deviation explains; see the log); give a "
                "number instead (0: none)"
            )
        return self.noise.noise(shared), shared


def confirmed_best(dist: Distributions, names: Sequence[str], alpha: float) -> int | None:
    """The model the analysis's test puts significantly above every other model at ``alpha`` (two-sided bootstrap
    p, Holm-Sidak over all pairs of the models and the lower noise ceiling: ``analyze.py`` with
    ``bootstrap.alpha=alpha``), or None when no model is."""
    tests = pairwise_tests(dist, include=[*names, LOWER], alpha=alpha)
    M = len(names)
    winners = [m for m in range(M) if all(tests.significance[m, j] == 1 for j in range(M) if j != m)]
    return winners[0] if winners else None


def final_alpha(alpha: float, interim_alpha: float, interim_looks: int) -> float:
    """The alpha left for the final test after ``interim_looks`` looks at ``interim_alpha`` each (union bound);
    a ValueError when nothing is left."""
    left = alpha - interim_alpha * interim_looks
    if left <= 0:
        raise UserError(
            f"{interim_looks} interim looks at alpha {interim_alpha:g} spend all of the study's alpha {alpha:g}: "
            "lower the interim alpha or stop after fewer batches"
        )
    return left


def plausible_truths(samples: np.ndarray, estimates: np.ndarray, screen_alpha: float) -> tuple[int, ...]:
    """Models whose bootstrap difference to the leader is not significantly negative (one-sided)."""
    leader = int(np.argmax(estimates))
    behind = (samples[:, [leader]] - samples) > 0  # (B, M): leader above model in this resample
    p_below = 1.0 - behind.mean(axis=0)  # one-sided p that the model is below the leader
    return tuple(m for m in range(len(estimates)) if m == leader or p_below[m] >= screen_alpha)


def evidence(
    batches: Sequence[Batch],
    names: Sequence[str],
    screen_alpha: float = AdaptiveSettings.model_fields["screen_alpha"].default,
    n_resamples: int = 2000,
    fit_stimuli: int | None = 300,
    seed: int = 0,
    interim_alpha: float = 0.0,
) -> Evidence:
    """Pooled bootstrap screen and noise refit (on at most ``fit_stimuli`` stimuli per batch, for speed); with
    ``interim_alpha`` > 0 also the interim look's verdict on the same resamples (``Evidence.confirmed``)."""
    M = len(names)
    dist = pooled_bootstrap([(b.human, b.model, b.conditions) for b in batches], names, n_resamples, seed)
    candidates = plausible_truths(dist.samples[:, :M], dist.estimates[:M], screen_alpha)
    leader = int(np.argmax(dist.estimates[:M]))
    rng = np.random.default_rng(seed)
    gains, sds, shared, weights = [], [], [], []
    for b in batches:
        N = b.human.shape[1]
        keep = np.sort(rng.choice(N, min(N, fit_stimuli or N), replace=False))
        fit = fit_noise(b.human[:, keep], b.model[:, keep], reference=leader)
        gains.append(fit.gain)
        sds.append(fit.sd)
        try:
            shared.append(fit_shared_sd(b.human[:, keep], b.model[:, keep], fit))
            weights.append(len(fit.sd))
        except ValueError as reason:  # too few people, or none whose ratings vary: this batch gives no fit
            log.warning("batch of %d participants: no shared deviation fitted (%s)", len(fit.sd), reason)
    noise = NoiseFit(leader, np.concatenate(gains), np.concatenate(sds))
    shared_sd = float(np.average(shared, weights=weights)) if shared else np.nan
    log.info(
        "evidence: candidate truths %s, fitted sd %.2f-%.2f, gain %.2f-%.2f, shared sd %.2f",
        [names[m] for m in candidates],
        noise.sd.min(),
        noise.sd.max(),
        noise.gain.min(),
        noise.gain.max(),
        shared_sd,
    )
    confirmed = confirmed_best(dist, names, interim_alpha) if interim_alpha > 0 else None
    return Evidence(candidates, noise, dist.estimates[:M], shared_sd, confirmed)


def next_batch(
    pool: Pool,
    probabilities: np.ndarray,
    found: Evidence,
    constraints: DesignConstraints,
    n_participants: int,
    n_panel: int = 256,
    seed: int = 0,
    shared_sd: float | Literal["fit"] = 0.0,
    **design_options: Any,
) -> Design:
    """The next batch's stimuli: maximin separation of the remaining candidate truths from every rival
    (``design_options``: ``select_design``'s, e.g. ``baseline`` for the relative criterion). ``shared_sd``: the
    deviation people share to plan for, or "fit" (``Evidence.planned_noise``)."""
    noise, shared = found.planned_noise(shared_sd)
    panel = ReferencePanel(
        probabilities,
        pool.conditions,
        noise,
        n_panel,
        truths=found.candidates,
        seed=seed,
        shared_sd=shared,
    )
    return select_design(pool, panel, constraints, n_participants, seed=seed, **design_options)
