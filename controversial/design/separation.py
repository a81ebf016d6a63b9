"""Expected separation of every pair of models under the analysis's bootstrap test, for any stimulus set.

The analysis scores model m by the mean over participants of Pearson r(participant s, model m) over
all (stimulus, category) entries, and tests a pair by resampling participants and stimuli (within
condition strata). For planning, suppose model t generated the ratings (through the
simulated-participant noise model). A reference panel of ``R`` simulated participants per truth on
the whole candidate pool gives per-stimulus sufficient statistics, so that for any subset (a 0/1
weight per stimulus) we get, for every ordered pair (truth t, rival j):

- ``effect``: the expected difference d = mean_s r(s, t) - r(s, j);
- ``participant_var``: the across-participant variance of d_s (the participant bootstrap: /S);
- ``stimulus_var(S)``: the stratified stimulus-bootstrap variance of d by the delta method,
  sum over strata of N_c * var_c(dd/dw_n), with the panel's own sampling noise swapped for that of
  S participants;
- with a deviation people share (``shared_sd``, integrated out, ``ReferencePanel``), its variance of d, which
  stays in ``stimulus_var`` for any S;
- ``z(S) = effect / sqrt(participant_var / S + stimulus_var(S))``, and the participants needed for
  a given alpha and power (infinite when stimulus variance alone already exceeds the effect: more
  participants cannot help, only other stimuli).

Everything is linear algebra on per-stimulus sums, so a design optimiser can evaluate thousands of
candidate additions at once (``z_after``).

The panel is kept twice over the same simulated participants: as ratings (their noise drawn) and as
expected ratings (``simulate.expected_ratings``: each rating's mean and mean square over the
participant's own noise, exactly). Effects and mean gradients come from the expected ratings. The
participant variance is the variance of d across the panel's expected ratings (people differ in gain
and noise) plus each person's own-noise variance of d, by the delta method from per-stimulus sums of
the rating variance times products of model probabilities. Only the 1/S part of the stimulus
variance still comes from the drawn ratings. Why: an optimiser choosing 820 of thousands of
candidates can pick stimuli whose drawn ratings happen to favour the truth, and, more, whose noise
happens to cancel across the panel's 256 people: with drawn ratings (participants of noise sd
12-16, docs/design.md) the chosen set's participant variance of kde against abs was 0.09e-3 on its own
panel and 0.45e-3 on a fresh one, its weakest z 14.6 against 10.4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
from scipy.stats import norm

from controversial.analysis.simulate import ParticipantNoise, shared_moments, simulate_participants
from controversial.errors import UserError


class _Sums(NamedTuple):
    """A panel's per-stimulus sums over categories: ratings u (T, R, N), squares uu (T, R, N), products with every
    model's probabilities uv (T, R, M, N)."""

    u: np.ndarray
    uu: np.ndarray
    uv: np.ndarray


class _NoiseSums(NamedTuple):
    """Per-stimulus sums over categories of the panel's mean rating variance v times model products: v p_m p_l
    q (T, M, M, N), v p_m (T, M, N), v y p_m (T, M, N), v (T, N), v y (T, N), v y^2 (T, N), y the expected rating."""

    q: np.ndarray
    vp: np.ndarray
    vyp: np.ndarray
    v: np.ndarray
    vy: np.ndarray
    vyy: np.ndarray


@dataclass(frozen=True)
class Separation:
    """Per ordered pair (truth t, rival j), for one stimulus set; NaN where t == j."""

    truths: tuple[int, ...]  # model index of each truth (rows)
    effect: np.ndarray  # (T, M)
    participant_var: np.ndarray  # (T, M)
    stimulus_var_limit: np.ndarray  # (T, M): stimulus variance with infinitely many participants
    stimulus_noise: np.ndarray  # (T, M): its 1/S part times S

    def z(self, n_participants: float | np.ndarray) -> np.ndarray:
        """Expected test statistic (effect / bootstrap SE) with ``n_participants`` participants."""
        var = (self.participant_var + self.stimulus_noise) / n_participants + self.stimulus_var_limit
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.effect / np.sqrt(var)

    def power(self, n_participants: float | np.ndarray, alpha: float, n_comparisons: int = 1) -> np.ndarray:
        """Predicted power of each pair's two-sided test (normal approximation, Sidak over ``n_comparisons``)."""
        return norm.cdf(self.z(n_participants) - critical_z(alpha, n_comparisons))

    def participants_needed(self, alpha: float, power: float, n_comparisons: int = 1, whole: bool = True) -> np.ndarray:
        """Smallest S with z(S) >= z_crit + z_power (Sidak-corrected over ``n_comparisons``); inf if none.
        ``whole=False``: the exact real S where z reaches it, not rounded up nor raised to the analysis's minimum of 2
        (what a plan scales: the floor would hide how much margin a truth has)."""
        target = target_z(alpha, power, n_comparisons)
        room = np.where(self.effect > 0, (self.effect / target) ** 2 - self.stimulus_var_limit, -1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            needed = (self.participant_var + self.stimulus_noise) / room
        if whole:
            needed = np.maximum(np.ceil(needed), 2)
        return np.where(room > 0, needed, np.inf)

    def participants_needed_per_truth(
        self, alpha: float, power: float, n_comparisons: int = 1, whole: bool = True
    ) -> np.ndarray:
        """(T,) the participants each truth needs to beat every rival: the most any of its pairs needs."""
        needed = self.participants_needed(alpha, power, n_comparisons, whole)
        return np.nanmax(np.where(np.isnan(self.effect), 0.0, needed), axis=1)


def critical_z(alpha: float, n_comparisons: int = 1) -> float:
    """Two-sided critical z at the Sidak level for ``n_comparisons`` (Holm-Sidak's strictest step)."""
    return float(norm.ppf(1.0 - (1.0 - (1.0 - alpha) ** (1.0 / n_comparisons)) / 2.0))


def target_z(alpha: float, power: float, n_comparisons: int = 1) -> float:
    """The expected z a pair needs for ``power`` at ``alpha``, Sidak over ``n_comparisons``: critical z + z of power."""
    return critical_z(alpha, n_comparisons) + float(norm.ppf(power))


def softmin(values: np.ndarray, temperature: float, axis: int | None = None) -> np.ndarray:
    """Smooth minimum (-tau log sum exp(-x/tau)); ignores NaN; approaches min as tau -> 0."""
    x = np.where(np.isnan(values), np.inf, values)
    low = np.min(x, axis=axis, keepdims=True)
    low = np.where(np.isfinite(low), low, 0.0)
    out = low - temperature * np.log(np.sum(np.exp(-(x - low) / temperature), axis=axis, keepdims=True))
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


class ReferencePanel:
    """Simulated participants for every assumed truth on the whole pool, kept as per-stimulus sums.

    ``probabilities`` (M, N, K): every model on every candidate; ``conditions`` (N,): bootstrap
    strata; ``truths``: which models may have generated the ratings (default: every model).

    ``shared_sd > 0``: people deviate from the truth in a way they share (``simulate.shared_deviation``,
    as the paper found: every model below the lower noise ceiling). No deviation is drawn (the optimiser
    would pick the stimuli on which a draw happens to favour the truth); it is integrated out
    (``simulate.shared_moments``): expected ratings are taken over it as well as over each person's own
    noise, and the part of a rating's variance it causes enters the stimulus variance by the same delta
    method as the own noise, without the 1/S, because everyone in a population shares it.
    """

    def __init__(
        self,
        probabilities: np.ndarray,
        conditions: Sequence[str],
        noise: ParticipantNoise,
        n_panel: int = 16,
        truths: Sequence[int] | None = None,
        seed: int = 0,
        shared_sd: float = 0.0,
    ) -> None:
        p = np.asarray(probabilities, dtype=np.float64)
        self.M, self.N, self.K = p.shape
        self.truths = tuple(range(self.M)) if truths is None else tuple(int(t) for t in truths)
        if shared_sd < 0:
            raise UserError(f"shared_sd must be >= 0, got {shared_sd}")
        if len(conditions) != self.N:
            raise UserError(f"conditions has {len(conditions)} entries for {self.N} stimuli")
        if n_panel < 2:
            raise UserError("n_panel must be at least 2 (a participant variance needs two)")
        names, codes = np.unique(np.asarray(conditions), return_inverse=True)
        self.strata = codes  # (N,) stratum index
        self.n_strata = len(names)
        self.R = n_panel
        seeds = np.random.SeedSequence(seed).spawn(len(self.truths))
        self.sv = p.sum(axis=2)  # (M, N)
        self.svv = (p * p).sum(axis=2)
        drawn: list[tuple[np.ndarray, ...]] = []
        expected: list[tuple[np.ndarray, ...]] = []
        noise_sums: list[tuple[np.ndarray, ...]] = []
        shared_sums: list[tuple[np.ndarray, ...]] = []

        def sums(variance: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, ...]:
            v, vm, vmm = (x.mean(axis=0) for x in (variance, variance * mean, variance * mean * mean))  # (N, K)
            return (
                np.einsum("nk,mnk,lnk->mln", v, p, p),
                np.einsum("nk,mnk->mn", v, p),
                np.einsum("nk,mnk->mn", vm, p),
                v.sum(axis=1),
                vm.sum(axis=1),
                vmm.sum(axis=1),
            )

        for t, child in zip(self.truths, seeds):
            # (R, N, K) drawn ratings (the deviation drawn for each person alone: it only sets the 1/S part), each
            # rating's mean and mean square over the deviation and own noise, and the deviation's share of its variance
            y = simulate_participants(p[t], n_panel, noise, seed=child, shared_sd=shared_sd)
            drawn.append((y.sum(axis=2), (y * y).sum(axis=2), np.einsum("rnk,mnk->rmn", y, p)))
            mean, square, shared = shared_moments(p[t], n_panel, noise, shared_sd, seed=child)
            expected.append((mean.sum(axis=2), square.sum(axis=2), np.einsum("rnk,mnk->rmn", mean, p)))
            noise_sums.append(sums(square - mean * mean - shared, mean))  # each rating's own-noise variance
            if shared_sd > 0:
                shared_sums.append(sums(shared, mean))
        # per-stimulus sums of ratings, squares and rating x model products: (T, R, N), (T, R, N), (T, R, M, N)
        self.drawn = _Sums(*(np.stack(a) for a in zip(*drawn)))
        self.expected = _Sums(*(np.stack(a) for a in zip(*expected)))
        self.average = _Sums(*(a.mean(axis=1) for a in (self.expected.u, self.expected.uu, self.expected.uv)))
        self.noise = _NoiseSums(*(np.stack(a) for a in zip(*noise_sums)))
        self.shared = _NoiseSums(*(np.stack(a) for a in zip(*shared_sums))) if shared_sd > 0 else None
        self._rows = np.arange(len(self.truths))
        self._own = np.array(self.truths)

    def _totals(self, weights: np.ndarray, sums: _Sums) -> tuple[np.ndarray, ...]:
        w = np.asarray(weights, dtype=np.float64)
        return (self.K * w.sum(), sums.u @ w, sums.uu @ w, sums.uv @ w, self.sv @ w, self.svv @ w)

    @staticmethod
    def _r(
        W: np.ndarray, Su: np.ndarray, Suu: np.ndarray, Suv: np.ndarray, Sv: np.ndarray, Svv: np.ndarray
    ) -> np.ndarray:
        """Pearson r from weighted sums; shapes broadcast (..., T, R) for humans, (M,) for models."""
        C = Suv - Su[..., None] * Sv / W[..., None, None, None]
        A = Suu - Su * Su / W[..., None, None]
        B = Svv - Sv * Sv / W[..., None, None, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            return C / np.sqrt(A[..., None] * B)

    def _pairs(self, r: np.ndarray) -> np.ndarray:
        """(..., T, R, M) correlations -> (..., T, R, M) differences d = r(truth) - r(rival)."""
        own = np.stack([r[..., i, :, t] for i, t in enumerate(self.truths)], axis=-2)  # (..., T, R)
        return own[..., None] - r

    def _noise_variance(
        self,
        W: np.ndarray,
        Su: np.ndarray,
        Suu: np.ndarray,
        Suv: np.ndarray,
        Sv: np.ndarray,
        Svv: np.ndarray,
        Q: np.ndarray,
        Vp: np.ndarray,
        Vyp: np.ndarray,
        V: np.ndarray,
        Vy: np.ndarray,
        Vyy: np.ndarray,
    ) -> np.ndarray:
        """(..., T, M) the variance of d over rating noise of variance var(y_e) per entry (a participant's own noise, or
        the population's shared deviation, ``_NoiseSums`` of either), by the delta method: sum over
        entries e of var(y_e) (dd/dy_e)^2, dd/dy_e = a_t (p_te - mean p_t) - a_j (p_je - mean p_j) - g (y_e - mean y)
        with a_m = 1 / sqrt(A B_m), g = (r_t - r_j) / A, at the panel's average expected ratings. Inputs are totals
        over the chosen set with any leading batch shape: the average sums (as ``_totals``) and the noise sums
        (``_NoiseSums``)."""
        rows, own = self._rows, self._own
        A = Suu - Su * Su / W[..., None]  # (..., T)
        B = Svv - Sv * Sv / W[..., None]  # (..., M)
        alpha = 1.0 / np.sqrt(A[..., None] * B[..., None, :])  # (..., T, M)
        r = (Suv - Su[..., None] * Sv[..., None, :] / W[..., None, None]) * alpha
        alpha_t = alpha[..., rows, own][..., None]  # (..., T, 1)
        gamma = (r[..., rows, own][..., None] - r) / A[..., None]
        mean_p = Sv / W[..., None]
        c = (
            alpha_t * mean_p[..., own][..., None]
            - alpha * mean_p[..., None, :]
            - gamma * (Su / W[..., None])[..., None]
        )
        diagonal = np.diagonal(Q, axis1=-2, axis2=-1)  # (..., T, M)
        sum_x2 = (
            alpha_t**2 * diagonal[..., rows, own][..., None]
            + alpha**2 * diagonal
            - 2 * alpha_t * alpha * Q[..., rows, own, :]
            + gamma**2 * Vyy[..., None]
            - 2 * alpha_t * gamma * Vyp[..., rows, own][..., None]
            + 2 * alpha * gamma * Vyp
        )
        sum_x = alpha_t * Vp[..., rows, own][..., None] - alpha * Vp - gamma * Vy[..., None]
        return sum_x2 - 2 * c * sum_x + c * c * V[..., None]

    @staticmethod
    def _noise_totals(weights: np.ndarray, sums: _NoiseSums) -> tuple[np.ndarray, ...]:
        """Totals over the chosen set of a panel's noise sums (own noise, or the shared deviation)."""
        w = np.asarray(weights, dtype=np.float64)
        return tuple(a @ w for a in sums)

    def _gradients(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per stimulus n, each (T, M, N): the panel mean of d(d)/d(w_n) from expected ratings, the variance of that
        mean's terms (its own sampling noise is this / R), and the panel variance from drawn ratings."""
        expected = self._gradient(weights, self.expected)
        mean, sampling = expected.mean(axis=1), expected.var(axis=1, ddof=1)
        del expected
        return mean, sampling, self._gradient(weights, self.drawn).var(axis=1, ddof=1)

    def _gradient(self, weights: np.ndarray, sums: _Sums) -> np.ndarray:
        """(T, R, M, N) each panel participant's d(d)/d(w_n)."""
        W, Su, Suu, Suv, Sv, Svv = self._totals(weights, sums)
        r = self._r(np.asarray(W), Su, Suu, Suv, Sv, Svv)  # (T, R, M)
        C = Suv - Su[..., None] * Sv / W
        A = Suu - Su * Su / W
        B = Svv - Sv * Sv / W
        K = self.K
        dC = (
            sums.uv
            - (sums.u[:, :, None, :] * Sv[None, None, :, None] + Su[:, :, None, None] * self.sv) / W
            + (Su[:, :, None] * Sv)[..., None] * K / W**2
        )
        dA = sums.uu - 2 * Su[..., None] * sums.u / W + (Su * Su)[..., None] * K / W**2
        dB = self.svv - 2 * Sv[:, None] * self.sv / W + (Sv * Sv)[:, None] * K / W**2
        with np.errstate(invalid="ignore", divide="ignore"):
            g = r[..., None] * (
                dC / C[..., None] - dA[:, :, None, :] / (2 * A[..., None, None]) - dB / (2 * B[:, None])
            )  # (T, R, M, N)
        own = np.stack([g[i, :, t] for i, t in enumerate(self.truths)])  # (T, R, N)
        return own[:, :, None, :] - g

    def separation(self, weights: np.ndarray) -> Separation:
        """Effect and variance components of every (truth, rival) pair for the stimulus set ``weights``."""
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (self.N,) or weights.sum() < 2:
            raise UserError("weights must be one 0/1 value per pool stimulus, at least two stimuli chosen")
        d = self._pairs(self._r(*(np.asarray(x) for x in self._totals(weights, self.expected))))  # (T, R, M)
        average = tuple(np.asarray(x) for x in self._totals(weights, self.average))
        own_noise = self._noise_variance(*average, *self._noise_totals(weights, self.noise))
        mean_g, sampling_g, var_g = self._gradients(weights)
        limit = np.zeros_like(d[:, 0])
        noise = np.zeros_like(limit)
        chosen = weights > 0
        for c in range(self.n_strata):
            members = chosen & (self.strata == c)
            n_c = weights[members].sum()
            if n_c == 0:
                continue
            g, w = mean_g[..., members], weights[members]
            spread = (w * g * g).sum(axis=-1) - (w * g).sum(axis=-1) ** 2 / n_c
            sampling = (n_c - 1) * (w * sampling_g[..., members]).sum(axis=-1) / n_c
            limit += np.maximum(spread - sampling / self.R, 0.0)
            noise += (n_c - 1) * (w * var_g[..., members]).sum(axis=-1) / n_c
        if self.shared is not None:  # the population's shared deviation: does not average out over participants
            limit = limit + self._noise_variance(*average, *self._noise_totals(weights, self.shared))
        out = Separation(self.truths, d.mean(axis=1), d.var(axis=1, ddof=1) + own_noise, limit, noise)
        return _mask_self(out)

    def z_after(
        self, weights: np.ndarray, candidates: np.ndarray, n_participants: float | np.ndarray, sign: int = 1
    ) -> np.ndarray:
        """z(S) of every (truth, rival) pair after adding (``sign`` +1) or removing (-1) each candidate, (C, T, M),
        one row per truth.

        Effect and participant variance are exact; the stimulus variance is updated to first order
        (the candidates' gradients at the current set), which is what makes this cheap.
        """
        weights = np.asarray(weights, dtype=np.float64)
        candidates = np.asarray(candidates, dtype=np.int64)

        expected = self.expected
        W, Su, Suu, Suv, Sv, Svv = self._totals(weights, expected)
        r = self._r(
            np.full(len(candidates), W + sign * self.K),
            Su + sign * expected.u[..., candidates].transpose(2, 0, 1),
            Suu + sign * expected.uu[..., candidates].transpose(2, 0, 1),
            Suv + sign * expected.uv[..., candidates].transpose(3, 0, 1, 2),
            Sv + sign * self.sv[:, candidates].T[:, None, None],
            Svv + sign * self.svv[:, candidates].T[:, None, None],
        )  # (C, T, R, M)
        d = self._pairs(r)
        effect, pvar = d.mean(axis=-2), d.var(axis=-2, ddof=1)
        del r, d
        W, Su, Suu, Suv, Sv, Svv = self._totals(weights, self.average)
        average_after = (  # the average sums after each candidate's change, (C, ...)
            np.full(len(candidates), W + sign * self.K),
            Su + sign * self.average.u[:, candidates].T,
            Suu + sign * self.average.uu[:, candidates].T,
            Suv + sign * self.average.uv[..., candidates].transpose(2, 0, 1),
            Sv + sign * self.sv[:, candidates].T,
            Svv + sign * self.svv[:, candidates].T,
        )

        def variance_after(sums: _NoiseSums) -> np.ndarray:
            """(C, T, M) the variance of d over this noise after each candidate's change."""
            after = (
                total + sign * np.moveaxis(a[..., candidates], -1, 0)
                for total, a in zip(self._noise_totals(weights, sums), sums)
            )
            return self._noise_variance(*average_after, *after)

        pvar = pvar + variance_after(self.noise)
        shared_var = variance_after(self.shared) if self.shared is not None else 0.0
        mean_g, sampling_g, var_g = self._gradients(weights)
        chosen = (weights > 0).astype(np.float64)
        one_hot = np.eye(self.n_strata)[self.strata] * chosen[:, None]  # (N, strata): chosen members
        n_c = one_hot.sum(axis=0)  # (strata,)
        s1, s2 = mean_g @ one_hot, (mean_g * mean_g) @ one_hot  # (T, M, strata)
        ss, sv = sampling_g @ one_hot, var_g @ one_hot

        def parts(
            n: np.ndarray, a: np.ndarray, b: np.ndarray, s: np.ndarray, v: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray]:
            """Stimulus variance of strata with n members and sums of mean gradients a, their squares b, their
            terms' variances s and the drawn gradients' variances v."""
            with np.errstate(invalid="ignore", divide="ignore"):
                noise = np.where(n > 0, (n - 1) * v / n, 0.0)
                sampling = np.where(n > 0, (n - 1) * s / n, 0.0)
                limit = np.where(n > 0, np.maximum(b - a * a / n - sampling / self.R, 0.0), 0.0)
            return limit, noise

        base_limit, base_noise = parts(n_c, s1, s2, ss, sv)
        stratum = self.strata[candidates]
        g, s, v = mean_g[..., candidates], sampling_g[..., candidates], var_g[..., candidates]  # (T, M, C)
        old_limit, old_noise = base_limit[..., stratum], base_noise[..., stratum]
        new_limit, new_noise = parts(
            n_c[stratum] + sign,
            s1[..., stratum] + sign * g,
            s2[..., stratum] + sign * g * g,
            ss[..., stratum] + sign * s,
            sv[..., stratum] + sign * v,
        )
        limit = (base_limit.sum(-1)[..., None] - old_limit + new_limit).transpose(2, 0, 1) + shared_var  # (C, T, M)
        noise = (base_noise.sum(-1)[..., None] - old_noise + new_noise).transpose(2, 0, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = effect / np.sqrt((pvar + noise) / n_participants + limit)
        return self._mask(z)

    def _mask(self, z: np.ndarray) -> np.ndarray:
        z = np.array(z, dtype=np.float64)
        for i, t in enumerate(self.truths):
            z[..., i, t] = np.nan
        return z


def _mask_self(s: Separation) -> Separation:
    arrays = [
        np.array(a, dtype=np.float64) for a in (s.effect, s.participant_var, s.stimulus_var_limit, s.stimulus_noise)
    ]
    for a in arrays:
        for i, t in enumerate(s.truths):
            a[i, t] = np.nan
    return Separation(s.truths, *arrays)
