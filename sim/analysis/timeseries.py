"""Storms over time: timeseries.parquet, counts per time bin from the requests and calls tables.

A storm is invisible in a summary (it averages the burst away) and plain in a time series: how
many requests were offered, how many calls went out, how many answers came back, how many 429s.
Everything here is computed from the result tables, so it can be recomputed from the files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.model.rows import OUTCOME_RATE_LIMITED

#: timeseries.parquet columns with unit and meaning (per-provider columns follow these).
TIMESERIES_COLUMNS: dict[str, tuple[str, str]] = {
    "policy": ("", "policy name"),
    "t_s": ("s", "start of the bin"),
    "offered": ("runs", "new customer requests arriving in the bin (first sends)"),
    "resent": ("runs", "customer re-sends arriving in the bin"),
    "started": ("calls", "calls sent in the bin (429s, hedges, retries and SDK retries included)"),
    "succeeded": ("runs", "runs that delivered their answer in the bin (goodput)"),
    "rate_limited": ("calls", "calls refused with a 429 in the bin"),
    "in_flight": ("calls", "calls sent and not yet ended at the end of the bin"),
    "tpm_used": ("tokens/min", "quota tokens admitted in the bin, as a per-minute rate"),
    "burst": ("bool", "the bin overlaps a scheduled burst (schedule arrivals)"),
}


def timeseries(
    requests: pd.DataFrame,
    calls: pd.DataFrame,
    bin_s: float,
    bursts: Sequence[tuple[float, float]] = (),
) -> pd.DataFrame:
    """One row per policy and bin of `bin_s` seconds, from 0 to the last event of any policy.

    With more than one provider, `started_<p>`, `rate_limited_<p>` and `tpm_used_<p>` split
    those columns per provider."""
    ends = [requests["end_s"].max(), requests["arrival_s"].max()]
    if len(calls):
        ends.append(calls["end_s"].max())
    last = max(float(x) for x in ends if pd.notna(x))
    n_bins = max(1, math.ceil(last / bin_s + 1e-9))
    edges = np.arange(n_bins + 1) * bin_s
    providers = sorted(calls["provider"].astype(str).unique()) if len(calls) else []
    frames = []
    for policy in pd.unique(requests["policy"]):
        runs = requests[requests["policy"] == policy]
        its = calls[calls["policy"] == policy]
        row: dict[str, object] = {"policy": str(policy), "t_s": edges[:-1]}
        first = runs["resend"] == 0
        row["offered"] = _count(runs.loc[first, "arrival_s"], edges)
        row["resent"] = _count(runs.loc[~first, "arrival_s"], edges)
        row["started"] = _count(its["start_s"], edges)
        row["succeeded"] = _count(runs.loc[runs["ok"], "end_s"], edges)
        limited = its["outcome"] == OUTCOME_RATE_LIMITED
        row["rate_limited"] = _count(its.loc[limited, "start_s"], edges)
        row["in_flight"] = _in_flight(its[~limited], edges)
        row["tpm_used"] = _sum(its["start_s"], its["quota_tokens"], edges) * 60.0 / bin_s
        row["burst"] = _overlaps(edges, bursts)
        if len(providers) > 1:
            for p in providers:
                part = its[its["provider"].astype(str) == p]
                row[f"started_{p}"] = _count(part["start_s"], edges)
                row[f"rate_limited_{p}"] = _count(
                    part.loc[part["outcome"] == OUTCOME_RATE_LIMITED, "start_s"], edges
                )
                row[f"tpm_used_{p}"] = (
                    _sum(part["start_s"], part["quota_tokens"], edges) * 60.0 / bin_s
                )
        frames.append(pd.DataFrame(row))
    frame = pd.concat(frames, ignore_index=True)
    frame["policy"] = frame["policy"].astype("string")
    return frame


def _count(times: pd.Series, edges: np.ndarray) -> np.ndarray:
    return np.histogram(times.to_numpy(float), bins=edges)[0].astype(np.int64)


def _sum(times: pd.Series, weights: pd.Series, edges: np.ndarray) -> np.ndarray:
    return np.histogram(times.to_numpy(float), bins=edges, weights=weights.to_numpy(float))[0]


def _in_flight(calls: pd.DataFrame, edges: np.ndarray) -> np.ndarray:
    """Calls started at or before each bin's end and ending after it."""
    start = np.sort(calls["start_s"].to_numpy(float))
    end = np.sort(calls["end_s"].to_numpy(float))
    at = edges[1:]
    return (np.searchsorted(start, at, "right") - np.searchsorted(end, at, "right")).astype(
        np.int64
    )


def _overlaps(edges: np.ndarray, bursts: Sequence[tuple[float, float]]) -> np.ndarray:
    out = np.zeros(len(edges) - 1, dtype=bool)
    for a, b in bursts:
        out |= (edges[:-1] < b) & (edges[1:] > a)
    return out


def recovery(
    series: pd.DataFrame, policy: str, burst: tuple[float, float], tolerance: float = 0.1
) -> tuple[float, float, float]:
    """How `policy` came out of `burst` = (start_s, end_s), from its goodput per second.

    Returns (level, after, back): the pre-burst level (mean over the bins in the second half of
    the time before the burst, past the start-up ramp); the mean one burst-length after the
    burst ends (over [end + L, end + 2L), L the burst's length); and the seconds from the end of
    the burst until a burst-length window of goodput first averages at least (1 - tolerance) x
    level (inf if it never does within the series)."""
    part = series[series["policy"].astype(str) == policy].sort_values("t_s")
    t = part["t_s"].to_numpy(float)
    width = float(t[1] - t[0]) if len(t) > 1 else 1.0
    rate = part["succeeded"].to_numpy(float) / width
    start, end = burst
    length = end - start
    before = rate[(t >= start / 2) & (t + width <= start + 1e-9)]
    level = float(before.mean()) if len(before) else math.nan
    later = (t >= end + length - 1e-9) & (t < end + 2 * length - 1e-9)
    after = float(rate[later].mean()) if later.any() else math.nan
    k = max(1, round(length / width))
    back = math.inf
    for i in np.flatnonzero(t >= end - 1e-9):
        window = rate[i : i + k]
        if len(window) < k:
            break
        if window.mean() >= (1 - tolerance) * level:
            back = float(t[i] - end)
            break
    return level, after, back
