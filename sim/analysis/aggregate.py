"""Replications pooled per sweep point and policy, with confidence intervals that never lie
about noise.

The hit rate's interval: the Wilson interval over the runs of every replication pooled, with
the count of runs divided by the design effect D = max(1, phi) when 2+ replications exist, phi
being the replications' spread measured against binomial noise (the Pearson dispersion
sum_i n_i (p_i - p)^2 / ((k - 1) p (1 - p))). When the replications agree as well as independent
runs would (phi <= 1) the band is the pooled binomial one, as narrow as the data allow; when they
differ more (runs within a replication share queues, bursts and bad spells) it widens by
sqrt(phi), so it is never narrower than the noise seen between replications. Costs are pooled
ratios (total cost over total requests or successes), so a policy that fails more never looks
cheaper per success.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

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
    lo, hi, phi = hit_rate_interval(
        part["hit_rate"].to_numpy(dtype=float), part["runs"].to_numpy(dtype=float)
    )
    row: dict[str, float | int | str] = {
        "replications": reps,
        "requests": requests,
        "runs": runs,
        "hit_rate": successes / runs if runs else math.nan,
        "hit_rate_lo": lo,
        "hit_rate_hi": hi,
        "hit_rate_ci": "wilson+spread" if phi > 1 else "wilson",
        "hit_rate_dispersion": phi,
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
    rates: np.ndarray, runs: np.ndarray, z: float = 1.959963984540054
) -> tuple[float, float, float]:
    """(lo, hi, phi) of the pooled hit rate of replications with hit rates `rates` over `runs`
    runs each: Wilson on the pooled runs, their count divided by max(1, phi) (see module doc).
    phi is NaN with fewer than 2 replications (nothing to measure the spread with)."""
    runs = np.asarray(runs, dtype=float)
    successes = np.round(np.asarray(rates, dtype=float) * runs)
    total = float(runs.sum())
    if total <= 0:
        return math.nan, math.nan, math.nan
    pooled = float(successes.sum()) / total
    phi = dispersion(successes, runs)
    lo, hi = wilson_score(pooled, total / max(1.0, phi if math.isfinite(phi) else 1.0), z)
    return lo, hi, phi


def dispersion(successes: np.ndarray, runs: np.ndarray) -> float:
    """The replications' spread in units of binomial noise (Pearson chi-square over k - 1 degrees
    of freedom): about 1 when they differ only as independent runs would; NaN for fewer than 2
    replications, 0 when the pooled rate is 0 or 1 (every replication then agrees)."""
    keep = runs > 0
    successes, runs = successes[keep], runs[keep]
    if len(runs) < 2:
        return math.nan
    pooled = float(successes.sum() / runs.sum())
    if pooled <= 0.0 or pooled >= 1.0:
        return 0.0
    chi2 = float((runs * (successes / runs - pooled) ** 2).sum()) / (pooled * (1 - pooled))
    return chi2 / (len(runs) - 1)


def wilson_score(p_hat: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a proportion p_hat over a (possibly fractional, effective)
    count n; equals `sim.analysis.analytic.wilson_interval` for whole counts."""
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p_hat + z2 / (2.0 * n)) / denom
    half = (z / denom) * math.sqrt(p_hat * (1.0 - p_hat) / n + z2 / (4.0 * n * n))
    lo = 0.0 if p_hat <= 0.0 else max(0.0, centre - half)  # exact at the ends, as analytic's
    hi = 1.0 if p_hat >= 1.0 else min(1.0, centre + half)
    return lo, hi


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
