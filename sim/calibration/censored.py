"""Right-censored calls in the stall mixture's likelihood: a call the client cut at elapsed c
(a timeout, a deadline's or a race's cancellation) says only that the call would have taken
longer than c; it contributes log P(latency > c) under the fitted law (docs/fitting.md).

The law's parameters theta are those of `sim.calibration.marginals.mixture_loglik`:
(mu_v, log s_v, logit p, mu_s, log s_s); the integrals are Gauss-Legendre over a quantile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, ndtr, ndtri

#: Gauss-Legendre nodes over a quantile (as the mixture's density).
NODES = 32
_T, _W = np.polynomial.legendre.leggauss(NODES)
_T, _W = (_T + 1) / 2, _W / 2
#: Nodes over the first token's quantile where it was not logged: each cut call's probability
#: within 1e-3 of 128 nodes' on the default scenario's (log-likelihood sum within 0.3 of 503).
FIRST_NODES = 16
_TF, _WF = np.polynomial.legendre.leggauss(FIRST_NODES)
_TF, _WF = (_TF + 1) / 2, _WF / 2


@dataclass(frozen=True)
class Censored:
    """Calls the client cut (right-censored): what is known is that the rest of the call would
    have taken longer than `after` seconds (elapsed minus first token where the first token was
    logged; the whole elapsed time where it was not, `unknown_first`)."""

    after: np.ndarray
    log_n: np.ndarray  # log output tokens (0 in total time)
    unknown_first: np.ndarray  # bool: no first token logged: `after` is the whole call's
    first: tuple[float, float] | None = None  # (mu, sigma) of first token, for unknown_first

    def __len__(self) -> int:
        return len(self.after)


def log_survival_rest(theta: np.ndarray, x: np.ndarray, log_n: np.ndarray) -> np.ndarray:
    """log P(generation + stall > x) per call under theta (0 where x <= 0):
    S_G(x) + p * integral over generation's quantile v in (0, F_G(x)) of S_S(x - G^-1(v)) dv."""
    out = np.zeros(len(x))
    pos = x > 0
    if not pos.any():
        return out
    s_v, p = math.exp(theta[1]), float(expit(theta[2]))
    xs, m = x[pos], log_n[pos] - theta[0]
    z = (np.log(xs) - m) / s_v
    top = ndtr(z)
    zy = ndtri(np.clip(top[:, None] * _T[None, :], 1e-300, 1.0))
    rest = xs[:, None] - np.exp(m[:, None] + s_v * zy)
    with np.errstate(divide="ignore", invalid="ignore"):
        stall = ndtr(-(np.log(rest) - theta[3]) / math.exp(theta[4]))
    stall = np.where(rest > 0, stall, 1.0)
    total = ndtr(-z) + p * top * (stall * _W[None, :]).sum(axis=1)
    out[pos] = np.log(np.maximum(total, 1e-300))
    return out


def censored_loglik(theta: np.ndarray, cens: Censored) -> np.ndarray:
    """Per-call log P(the call outlasts its cut) under theta: log S_R(after) where the first
    token was logged; where not, log P(T + R > after) = log(S_T(c) + integral over T's quantile
    u in (0, F_T(c)) of S_R(c - T^-1(u)) du) with T the fitted first-token law (Gauss-Legendre)."""
    unknown_first = cens.unknown_first & (cens.first is not None)
    ll = np.zeros(len(cens))
    known = ~unknown_first
    ll[known] = log_survival_rest(theta, cens.after[known], cens.log_n[known])
    unknown = np.flatnonzero(unknown_first)
    if len(unknown) and cens.first is not None:
        mu_t, s_t = cens.first
        c = cens.after[unknown]
        zt = (np.log(c) - mu_t) / s_t
        ft = ndtr(zt)
        t = np.exp(mu_t + s_t * ndtri(np.clip(ft[:, None] * _TF[None, :], 1e-300, 1.0)))
        rest = (c[:, None] - t).ravel()
        log_n = np.repeat(cens.log_n[unknown], FIRST_NODES)
        surv = np.exp(log_survival_rest(theta, rest, log_n)).reshape(len(c), FIRST_NODES)
        total = ndtr(-zt) + ft * (surv * _WF[None, :]).sum(axis=1)
        ll[unknown] = np.log(np.maximum(total, 1e-300))
    return ll


def censored_scores(theta: np.ndarray, cens: Censored, h: float = 1e-5) -> np.ndarray:
    """Per-call scores (n, len(theta)) of `censored_loglik`, by central differences."""
    out = np.empty((len(cens), len(theta)))
    for i in range(len(theta)):
        step = np.zeros(len(theta))
        step[i] = h
        out[:, i] = (censored_loglik(theta + step, cens) - censored_loglik(theta - step, cens)) / (
            2 * h
        )
    return out


def censored_gradient(
    theta: np.ndarray, cens: Censored, h: float = 1e-6
) -> tuple[float, np.ndarray]:
    """The censored calls' summed log-likelihood and its gradient by forward differences (half
    the evaluations of `censored_scores`; for the optimiser, whose steps need no more)."""
    base = float(np.sum(censored_loglik(theta, cens)))
    grad = np.empty(len(theta))
    for i in range(len(theta)):
        step = np.zeros(len(theta))
        step[i] = h
        grad[i] = (float(np.sum(censored_loglik(theta + step, cens))) - base) / h
    return base, grad
