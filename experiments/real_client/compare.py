"""From the logs to the comparison: per-request tables of a real run and of tailsim's replay of
it, the per-call overhead measured from the client and server logs, and real vs simulated with
95% confidence intervals by a moving-block bootstrap over requests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: A metric of per-request columns (numpy arrays keyed as the per-request frames' columns).
Metric = Callable[[dict[str, np.ndarray]], float]
COLUMNS = ("latency_s", "ok", "calls", "r429")


def _quantile(q: float) -> Metric:
    return lambda d: float(np.quantile(d["latency_s"], q))


def _hits_median(d: dict[str, np.ndarray]) -> float:
    """Median latency of the requests answered in time (NaN without one)."""
    hits = d["latency_s"][d["ok"] > 0]
    return float(np.median(hits)) if hits.size else float("nan")


#: The compared metrics: name -> (function, unit, difference relative (True) or in points).
METRICS: dict[str, tuple[Metric, str, bool]] = {
    "hit rate": (lambda d: float(d["ok"].mean()), "fraction", False),
    "p50": (_quantile(0.50), "s", True),
    "p95": (_quantile(0.95), "s", True),
    "p50 of hits": (_hits_median, "s", True),
    "calls/req": (lambda d: float(d["calls"].mean()), "calls", True),
    "429s/req": (lambda d: float(d["r429"].mean()), "calls", True),
}


def real_requests(requests: list[dict], server: pd.DataFrame, deadline_s: float) -> pd.DataFrame:
    """One row per real request, in arrival order: arrival (s from the first), latency
    (`deadline_s` for a failed one, as tailsim counts it), ok, HTTP calls the server received
    for it and how many of them it answered 429."""
    df = pd.DataFrame(requests).sort_values("request").reset_index(drop=True)
    per = server.assign(request=server["call_id"].str.split("-").str[0].astype(int))
    calls = per.groupby("request").size()
    r429 = per[per["status"] == 429].groupby("request").size()
    ok = (df["outcome"] == "ok") & (df["end"] - df["arrival"] <= deadline_s)
    return pd.DataFrame(
        {
            "arrival_s": df["arrival"] - df["arrival"].min(),
            "latency_s": np.where(ok, df["end"] - df["arrival"], deadline_s),
            "ok": ok,
            "calls": df["request"].map(calls).fillna(0).to_numpy(),
            "r429": df["request"].map(r429).fillna(0).to_numpy(),
        }
    )


def sim_requests(requests: pd.DataFrame, calls: pd.DataFrame, policy: str) -> pd.DataFrame:
    """The same table from tailsim's requests and calls of one policy (first sends only)."""
    req = requests[(requests["policy"] == policy) & (requests["resend"] == 0)]
    req = req.sort_values("request_id").set_index("request_id")
    mine = calls[(calls["policy"] == policy) & (calls["resend"] == 0)]
    r429 = mine[mine["outcome"] == "rate_limited"].groupby("request_id").size()
    return pd.DataFrame(
        {
            "arrival_s": req["arrival_s"].to_numpy(),
            "latency_s": req["latency_s"].to_numpy(),
            "ok": req["ok"].to_numpy(),
            "calls": req["calls"].to_numpy(),
            "r429": req.index.map(r429).fillna(0).to_numpy(),
        }
    )


@dataclass(frozen=True)
class Overhead:
    """Per-call client overhead measured from the logs (seconds, one value per call)."""

    total_s: np.ndarray  # client call time minus the server's queue and service
    held_s: np.ndarray  # the part inside the server's slot but outside service

    @property
    def held_share(self) -> float:
        """Share of the overhead that holds the slot, in [0, 1]."""
        total = float(self.total_s.sum())
        return float(np.clip(self.held_s.sum() / total, 0.0, 1.0)) if total > 0 else 0.0


def measure_overhead(calls: list[dict], server: pd.DataFrame) -> Overhead:
    """Overhead of the client calls answered 200 at their first HTTP attempt: the client's
    start-to-end minus the server's queue (arrival to slot) and service (start to end); the held
    part is slot-to-service-start (the server's own work while holding the slot)."""
    client = pd.DataFrame(calls)
    client = client[client["outcome"] == "ok"].set_index("call_id")
    attempts = server.groupby("call_id").size()
    single = server[server["call_id"].map(attempts) == 1]
    single = single[single["status"] == 200].set_index("call_id")
    both = client.join(single, how="inner", lsuffix="_c")
    total = (both["end_c"] - both["start_c"]) - (both["slot"] - both["arrival"])
    total = total - (both["end"] - both["start"])
    held = both["start"] - both["slot"]
    return Overhead(total.to_numpy(dtype=float), held.to_numpy(dtype=float))


def _blocks(n: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of one moving-block bootstrap resample of 0..n-1 (consecutive blocks)."""
    block = max(1, min(block, n))
    starts = rng.integers(0, n - block + 1, size=-(-n // block))
    return (starts[:, None] + np.arange(block)[None, :]).ravel()[:n]


def bootstrap(
    real: pd.DataFrame,
    sims: list[pd.DataFrame],
    *,
    block: int | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Real vs simulated per metric with 95% percentile intervals. Requests are resampled in
    blocks of consecutive arrivals (queues and quotas tie neighbours together); the same blocks
    are taken from the real run and from every simulated replication of it (same arrivals), so
    the difference's interval is paired."""
    n = len(real)
    for s in sims:
        if len(s) != n:
            raise ValueError(f"a simulated replay has {len(s)} requests, the real run {n}")
    block = block or max(5, round(np.sqrt(n)))
    rng = np.random.default_rng(seed)
    re = {c: real[c].to_numpy(dtype=float) for c in COLUMNS}
    si = {c: np.stack([x[c].to_numpy(dtype=float) for x in sims]) for c in COLUMNS}
    draws: dict[str, list[tuple[float, float]]] = {name: [] for name in METRICS}
    for _ in range(n_boot):
        idx = _blocks(n, block, rng)
        r = {c: v[idx] for c, v in re.items()}
        s = {c: v[:, idx].ravel() for c, v in si.items()}
        for name, (fn, _unit, _rel) in METRICS.items():
            draws[name].append((fn(r), fn(s)))
    rows = []
    for name, (fn, unit, rel) in METRICS.items():
        arr = np.asarray(draws[name])
        real_v, sim_v = fn(re), fn({c: v.ravel() for c, v in si.items()})
        if rel:
            with np.errstate(divide="ignore", invalid="ignore"):
                diff = arr[:, 1] / arr[:, 0] - 1.0
            diff_v = sim_v / real_v - 1.0 if real_v else np.nan
        else:
            diff, diff_v = arr[:, 1] - arr[:, 0], sim_v - real_v
        lo = np.nanquantile(arr, 0.025, axis=0)
        hi = np.nanquantile(arr, 0.975, axis=0)
        finite = diff[np.isfinite(diff)]
        d_lo, d_hi = (
            (float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975)))
            if finite.size
            else (np.nan, np.nan)
        )
        rows.append(
            {
                "metric": name,
                "unit": unit,
                "real": real_v,
                "real_lo": lo[0],
                "real_hi": hi[0],
                "sim": sim_v,
                "sim_lo": lo[1],
                "sim_hi": hi[1],
                "diff": diff_v,
                "diff_lo": d_lo,
                "diff_hi": d_hi,
                "diff_kind": "relative" if rel else "points",
            }
        )
    return pd.DataFrame(rows)
