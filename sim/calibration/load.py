"""Load dependence from a call log: the calls of one provider in flight when each call starts
(reconstructed from overlapping start and end times), and the load curve
`slowdown: {a, k}` (first token and generation x (1 + a * utilisation**k)) fitted to the
log-latency residuals against utilisation = in flight / concurrency.

The concurrency is given (the provider's slots) or taken as the most calls ever seen in
flight. Least squares of r = c + log(1 + a u**k) (outliers beyond 4 robust SDs left out), the
flat model r = c beside it: supported when the F test of the two extra parameters rejects at
1% and a > 0."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.01


@dataclass(frozen=True)
class LoadFit:
    """The fitted load curve, its SEs, the concurrency used and the test."""

    supported: bool
    a: float
    k: float
    standard_errors: dict[str, float]
    concurrency: float
    evidence: str


def in_flight(start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """How many calls (this one included) were in flight at each call's start."""
    starts = np.sort(start_s)
    ends = np.sort(end_s)
    started = np.searchsorted(starts, start_s, side="right")
    ended = np.searchsorted(ends, start_s, side="right")
    return (started - ended).astype(float)


def _curve(u: np.ndarray, c: float, a: float, k: float) -> np.ndarray:
    return c + np.log1p(a * u**k)


def fit_load(
    start_s: np.ndarray,
    latency_s: np.ndarray,
    residual: np.ndarray,
    concurrency: float | None = None,
) -> LoadFit:
    """The load curve of one provider's calls (start, latency and log-latency residual)."""
    busy = in_flight(np.asarray(start_s, float), np.asarray(start_s, float) + latency_s)
    slots = float(concurrency) if concurrency else float(busy.max())
    u = np.minimum(busy / slots, 1.0)
    r = np.asarray(residual, float)
    med = float(np.median(r))
    mad = float(np.median(np.abs(r - med))) * 1.4826 or 1.0
    keep = np.abs(r - med) < 4 * mad
    u, r = u[keep], r[keep]
    n = len(r)
    nan = math.nan
    if n < 50 or u.max() - u.min() < 0.05:
        return LoadFit(False, nan, nan, {}, slots, f"{n} calls, utilisation barely varies")
    rss_flat = float(((r - r.mean()) ** 2).sum())
    try:
        params, cov = optimize.curve_fit(
            _curve, u, r, p0=[r.mean(), 0.5, 2.0], bounds=([-np.inf, 0, 0.1], [np.inf, 50, 10])
        )
    except (RuntimeError, ValueError):
        return LoadFit(False, nan, nan, {}, slots, "the load curve did not converge")
    rss = float(((r - _curve(u, *params)) ** 2).sum())
    f_stat = ((rss_flat - rss) / 2) / (rss / (n - 3))
    crit = float(stats.f.ppf(1 - ALPHA, 2, n - 3))
    errors = np.sqrt(np.clip(np.diag(cov), 0, None))
    supported = bool(f_stat > crit and params[1] > 0)
    evidence = (
        f"F {f_stat:.1f} vs F(2, {n - 3}) crit {crit:.2f} (alpha {ALPHA}) over a flat model; "
        f"concurrency {slots:g} ({'given' if concurrency else 'most seen in flight'}); {n} calls"
    )
    return LoadFit(
        supported,
        float(params[1]),
        float(params[2]),
        {"a": float(errors[1]), "k": float(errors[2])},
        slots,
        evidence,
    )
