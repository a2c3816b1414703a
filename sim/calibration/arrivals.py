"""Arrivals from timestamps: Poisson or bursty (the on/off process of `arrivals: kind: bursty`).

The bursty kind is an interrupted Poisson process: arrivals at `peak_to_mean * rate_per_s`
during bursts of mean `burst_s`, none in silences of mean `burst_s * (peak_to_mean - 1)`. Each
arrival happens in a burst, so its gaps are independent, each a two-phase hyperexponential
whose density is closed form: f(t) = peak * [exp(M t)]_00 with M the chain's generator minus
the arrival rate. Both are fitted by maximum likelihood (scipy) on the gaps; bursty is
reported when its likelihood ratio over Poisson passes chi2(2)'s 99th percentile and its BIC is
lower. The index of dispersion of counts (variance / mean per window of ten mean gaps; 1 for
Poisson) is stated beside."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats
from scipy.special import logsumexp

ALPHA = 0.01


@dataclass(frozen=True)
class ArrivalsFit:
    """The chosen `arrivals:` block, its SEs and the test."""

    supported: bool  # bursty over Poisson
    block: dict[str, float | str]
    standard_errors: dict[str, float]
    evidence: str


def _gap_loglik(x: np.ndarray, gaps: np.ndarray) -> float:
    """log-likelihood of the gaps under the on/off process at (log peak, log 1/burst_s,
    log 1/silence_s)."""
    peak, off, on = (math.exp(v) for v in x)
    m00, trace, det = -(off + peak), -(off + peak + on), peak * on
    root = math.sqrt(max(trace * trace - 4 * det, 0.0)) or 1e-12
    fast, slow = (trace - root) / 2, (trace + root) / 2
    w_slow, w_fast = (m00 - fast) / root, (slow - m00) / root
    if w_slow <= 0 or w_fast <= 0:
        w_slow, w_fast = max(w_slow, 1e-300), max(w_fast, 1e-300)
    terms = np.stack([math.log(w_slow) + slow * gaps, math.log(w_fast) + fast * gaps])
    return float(len(gaps) * math.log(peak) + logsumexp(terms, axis=0).sum())


def dispersion_index(start_s: np.ndarray) -> float:
    """Variance over mean of arrival counts in windows of ten mean gaps."""
    t = np.sort(np.asarray(start_s, float))
    width = 10 * (t[-1] - t[0]) / max(len(t) - 1, 1)
    if width <= 0:
        return math.nan
    counts = np.bincount(((t - t[0]) // width).astype(int))[:-1]
    return float(counts.var() / counts.mean()) if len(counts) > 1 and counts.mean() else math.nan


def fit_arrivals(start_s: np.ndarray) -> ArrivalsFit:
    """Poisson against bursty on the arrival times `start_s` (seconds, any origin)."""
    t = np.sort(np.asarray(start_s, float))
    gaps = np.diff(t)
    n = len(gaps)
    if n < 10 or gaps.sum() <= 0:
        return ArrivalsFit(False, {}, {}, f"{n + 1} arrivals: too few")
    rate = n / float(gaps.sum())
    poisson = {"kind": "poisson", "rate_per_s": rate}
    l_poisson = n * math.log(rate) - rate * float(gaps.sum())
    index = dispersion_index(t)
    starts = []
    for burst_gaps, peak_to_mean in ((3.0, 1.5), (10.0, 2.0), (100.0, 5.0), (1000.0, 20.0)):
        peak = rate * peak_to_mean
        burst = burst_gaps / peak
        starts.append(np.log([peak, 1 / burst, 1 / (burst * (peak_to_mean - 1))]))
    # one optimisation, from the likeliest start (each start costs one evaluation)
    x0 = max(starts, key=lambda x: _gap_loglik(x, gaps))
    best = optimize.minimize(
        lambda x: -_gap_loglik(x, gaps),
        x0,
        method="Nelder-Mead",
        options={"xatol": 1e-6, "fatol": 1e-6, "maxiter": 4000},
    )
    l_bursty = -best.fun
    lr = 2 * (l_bursty - l_poisson)
    crit = float(stats.chi2.ppf(1 - ALPHA, 2))
    bic_gain = (-2 * l_bursty + 3 * math.log(n)) - (-2 * l_poisson + math.log(n))
    peak, off, on = (math.exp(v) for v in best.x)
    burst_s, silence_s = 1 / off, 1 / on
    peak_to_mean = 1 + silence_s / burst_s
    supported = bool(lr > crit and bic_gain < 0 and peak_to_mean > 1.0001)
    evidence = (
        f"bursty over Poisson: LR {lr:.1f} vs chi2(2) crit {crit:.2f} (alpha {ALPHA}), "
        f"BIC {bic_gain:+.1f}; index of dispersion {index:.2f} (Poisson 1); {n + 1} arrivals"
    )
    if not supported:
        return ArrivalsFit(False, poisson, {"rate_per_s": rate / math.sqrt(n)}, evidence)
    block = {
        "kind": "bursty",
        "rate_per_s": peak / peak_to_mean,
        "peak_to_mean": peak_to_mean,
        "burst_s": burst_s,
    }
    return ArrivalsFit(True, block, _bursty_errors(best.x, gaps), evidence)


def _bursty_errors(x: np.ndarray, gaps: np.ndarray) -> dict[str, float]:
    """SEs of rate_per_s, peak_to_mean and burst_s from the numerical Hessian (delta method)."""
    h = 1e-4
    hess = np.zeros((3, 3))
    for i in range(3):
        for j in range(i, 3):

            def f(di: float, dj: float, i: int = i, j: int = j) -> float:
                y = x.copy()
                y[i] += di
                y[j] += dj
                return -_gap_loglik(y, gaps)

            value = (f(h, h) - f(h, -h) - f(-h, h) + f(-h, -h)) / (4 * h * h)
            hess[i, j] = hess[j, i] = value
    try:
        cov = np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return {}
    peak, off, on = (math.exp(v) for v in x)

    def values(y: np.ndarray) -> np.ndarray:
        p, a, b = np.exp(y)
        ptm = 1 + a / b
        return np.array([p / ptm, ptm, 1 / a])

    base = values(x)
    jac = np.zeros((3, 3))
    for i in range(3):
        y = x.copy()
        y[i] += 1e-6
        jac[:, i] = (values(y) - base) / 1e-6
    var = np.diag(jac @ cov @ jac.T)
    del peak, off, on
    return {
        key: math.sqrt(v) if v > 0 else math.nan
        for key, v in zip(("rate_per_s", "peak_to_mean", "burst_s"), var, strict=True)
    }
