"""Replications pooled per sweep point and policy, with confidence intervals that never lie
about noise.

The hit rate's interval: with 2+ replications, the Student-t interval of the replication means,
widened to contain the pooled Wilson interval (so it is never narrower than the binomial noise of
the runs alone, and never zero-width when the replications happen to agree); with one
replication, the Wilson interval over the pooled runs. Costs are pooled ratios (total cost over
total requests or successes), so a policy that fails more never looks cheaper per success.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.analytic import wilson_interval

#: Columns averaged over replications as they are (means of per-replication values).
MEAN_COLUMNS = (
    "p50_s",
    "p95_s",
    "p99_s",
    "mean_s",
    "std_s",
    "tokens_per_request",
    "calls_per_request",
    "customer_success_rate",
    "retry_amplification",
    "extra_attempts_per_request",
    "timeouts_per_request",
    "cancelled_per_request",
    "rate_limited_per_request",
    "wasted_cost_share",
    "quality_mean",
)


def aggregate_replications(stacked: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (swept values, policy): pooled counts, hit rate with its CI, pooled costs,
    means of the other metrics, the replication t-interval of $/success when there are 2+."""
    rows = []
    for group, part in stacked.groupby([*keys, "policy"], sort=False):
        values = group if isinstance(group, tuple) else (group,)
        rows.append({**dict(zip([*keys, "policy"], values, strict=True)), **_pool(part)})
    return pd.DataFrame(rows)


def _pool(part: pd.DataFrame) -> dict[str, float | int | str]:
    """The pooled statistics of one point's replications."""
    reps = len(part)
    runs = int(part["runs"].sum())
    requests = int(part["requests"].sum())
    successes = int(np.round(part["hit_rate"] * part["runs"]).sum())
    cost = float((part["cost_per_request_usd"] * part["requests"]).sum())
    lo, hi, method = hit_rate_interval(part["hit_rate"].to_numpy(), successes, runs)
    row: dict[str, float | int | str] = {
        "replications": reps,
        "requests": requests,
        "runs": runs,
        "hit_rate": successes / runs if runs else math.nan,
        "hit_rate_lo": lo,
        "hit_rate_hi": hi,
        "hit_rate_ci": method,
        "cost_per_request_usd": cost / requests if requests else math.nan,
        "cost_per_success_usd": cost / successes if successes else math.nan,
    }
    per_rep = part["cost_per_success_usd"].to_numpy(dtype=float)
    row["cost_per_success_lo"], row["cost_per_success_hi"] = t_interval(per_rep)
    for column in MEAN_COLUMNS:
        if column in part:
            row[column] = float(part[column].mean())
    return row


def hit_rate_interval(
    rates: np.ndarray, successes: int, runs: int, level: float = 0.95
) -> tuple[float, float, str]:
    """(lo, hi, method) for a pooled hit rate from its replications' rates (see module doc)."""
    if runs == 0:
        return math.nan, math.nan, "none"
    w_lo, w_hi = wilson_interval(successes, runs)
    if len(rates) < 2:
        return w_lo, w_hi, "wilson"
    t_lo, t_hi = t_interval(rates, level)
    return max(0.0, min(t_lo, w_lo)), min(1.0, max(t_hi, w_hi)), "t+wilson"


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The Student-t interval of the mean of `values` (NaN with fewer than 2 finite values)."""
    from scipy import stats  # noqa: PLC0415 - slow import, needed only here

    finite = values[np.isfinite(values)]
    if len(finite) < 2:
        return math.nan, math.nan
    mean = float(finite.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(finite) - 1)) * float(
        finite.std(ddof=1) / math.sqrt(len(finite))
    )
    return mean - half, mean + half
