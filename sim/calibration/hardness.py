"""Per-request hardness from a call log: how much of the log-latency spread a request's calls
share (a one-way random-effects ANOVA on residuals grouped by request_id), as `difficulty`.

The engine's difficulty is a lognormal factor per request on first token and generation, the
same for every attempt: the log of it adds the same amount to each call's log latency. The
between-request variance component (ANOVA estimator for unbalanced groups, Searle's n0) is the
variance of that log factor, so `difficulty: {median: 1, p99: exp(z99 * sigma_b)}`. It is
supported when the F test of the request effect rejects at 1% (F = MSB / MSW)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

ALPHA = 0.01
Z99 = float(stats.norm.ppf(0.99))


@dataclass(frozen=True)
class HardnessFit:
    """The request effect: its share of the variance, the difficulty p99 and their SEs."""

    supported: bool
    share: float
    share_se: float
    p99: float
    p99_se: float
    evidence: str
    between: float = 0.0  # variance of the request effect (log scale)
    within: float = math.nan  # variance of a call around its request's effect


def request_effects(request_id: pd.Series, residual: np.ndarray, fit: HardnessFit) -> np.ndarray:
    """Each call's request effect, shrunk (best linear unbiased predictor): the request's mean
    residual times between / (between + within / calls of the request); 0 if not supported."""
    r = pd.Series(np.asarray(residual, float), index=request_id.index)
    if not fit.supported or fit.between <= 0:
        return np.zeros(len(r))
    groups = r.groupby(request_id)
    centred = groups.transform("mean") - float(r.mean())
    size = groups.transform("size")
    shrink = fit.between / (fit.between + fit.within / size)
    return np.nan_to_num((shrink * centred).to_numpy(float))


def fit_hardness(request_id: pd.Series, residual: np.ndarray) -> HardnessFit:
    """The random-effects fit over requests with two or more calls."""
    frame = pd.DataFrame({"g": np.asarray(request_id), "r": np.asarray(residual, float)}).dropna()
    sizes = frame.groupby("g")["r"].transform("size")
    frame = frame[sizes >= 2]
    groups = frame.groupby("g")["r"]
    n_i = groups.size().to_numpy(float)
    k, n = len(n_i), float(n_i.sum())
    if k < 10:
        nan = math.nan
        return HardnessFit(False, nan, nan, nan, nan, f"{k} requests with 2+ calls: too few")
    means = groups.mean().to_numpy()
    grand = float(frame["r"].mean())
    ssb = float((n_i * (means - grand) ** 2).sum())
    ssw = float(((frame["r"] - groups.transform("mean")) ** 2).sum())
    msb, msw = ssb / (k - 1), ssw / (n - k)
    n0 = (n - float((n_i**2).sum()) / n) / (k - 1)
    between = max((msb - msw) / n0, 0.0)
    var_between = 2.0 / n0**2 * (msb**2 / (k - 1) + msw**2 / (n - k))
    f_stat = msb / msw if msw > 0 else math.inf
    crit = float(stats.f.ppf(1 - ALPHA, k - 1, n - k))
    share = between / (between + msw) if between + msw > 0 else 0.0
    # delta method on share = B / (B + W) with W's variance 2 W^2 / (n - k)
    total = between + msw
    var_w = 2 * msw**2 / (n - k)
    share_se = math.sqrt((msw / total**2) ** 2 * var_between + (between / total**2) ** 2 * var_w)
    sigma = math.sqrt(between)
    p99 = math.exp(Z99 * sigma)
    p99_se = p99 * Z99 / (2 * sigma) * math.sqrt(var_between) if sigma > 0 else math.nan
    supported = bool(f_stat > crit and between > 0)
    evidence = (
        f"F {f_stat:.2f} vs F({k - 1}, {int(n) - k}) crit {crit:.2f} (alpha {ALPHA}); "
        f"request share of log-latency variance {share:.3f} +- {share_se:.3f}; "
        f"{k} requests, {int(n)} calls"
    )
    return HardnessFit(supported, share, share_se, p99, p99_se, evidence, between, msw)
