"""Per-call client overhead from a log holding both views of a call: latency_s (the client's)
minus server_latency_s (the provider's), as a distribution for `providers.P.overhead_s`.

A lognormal by maximum likelihood on the positive differences, given as {median, p99}, or
`{dist: constant, value}` when the differences do not vary (spread below 1% of the median)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

Z99 = float(stats.norm.ppf(0.99))
#: Below this relative spread (p99 / median - 1) the overhead is reported as a constant.
CONSTANT_SPREAD = 0.01


@dataclass(frozen=True)
class OverheadFit:
    """The overhead's distribution block, its SEs and the rows that went into it."""

    block: dict[str, float | str]
    standard_errors: dict[str, float]
    evidence: str
    n: int


def fit_overhead(latency_s: np.ndarray, server_latency_s: np.ndarray) -> OverheadFit | None:
    """The overhead distribution, or None when no call has both views."""
    both = ~(np.isnan(latency_s) | np.isnan(server_latency_s))
    diff = np.asarray(latency_s, float)[both] - np.asarray(server_latency_s, float)[both]
    if not len(diff):
        return None
    negative = int((diff < 0).sum())
    positive = diff[diff > 0]
    n = len(positive)
    if n < 2:
        return OverheadFit({"dist": "constant", "value": 0.0}, {}, f"{len(diff)} calls", len(diff))
    logs = np.log(positive)
    mu, sigma = float(logs.mean()), float(logs.std())
    median, p99 = math.exp(mu), math.exp(mu + Z99 * sigma)
    se_mu, se_sigma = sigma / math.sqrt(n), sigma / math.sqrt(2 * n)
    note = f"; {negative} calls with server > client time left out" if negative else ""
    if p99 / median - 1 < CONSTANT_SPREAD:
        value = float(positive.mean())
        se = float(positive.std()) / math.sqrt(n)
        return OverheadFit(
            {"dist": "constant", "value": value},
            {"value": se},
            f"constant: spread p99/median {p99 / median:.4f} < 1 + {CONSTANT_SPREAD}; {n} calls"
            + note,
            n,
        )
    errors = {
        "median": median * se_mu,
        "p99": p99 * math.sqrt(se_mu**2 + (Z99 * se_sigma) ** 2),
    }
    return OverheadFit(
        {"median": median, "p99": p99},
        errors,
        f"lognormal MLE on {n} differences latency_s - server_latency_s{note}",
        n,
    )
