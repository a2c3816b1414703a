"""Experiment: the load-dependent slowdown curve, and the p95 knee it brings before the queue.

A provider's `slowdown: {a, k}` stretches first token and generation by x(1 + a * u**k), u the
share of its slots busy when a call is served. Left: the curve for a few (a, k). Right: one step
on a 40-slot provider (calls of ~2 s) swept over arrival rate, with and without
`slowdown: {a: 1, k: 1}`: with it, p95 rises while no call has queued yet; without it, p95 stays
flat until the slots run out and the queue forms.

Run: `python experiments/slowdown_curve.py [--requests N] [--out DIR]`; prints a table and
writes DIR/slowdown.png (default DIR: results/experiments/; a reference copy is in
results/reference/slowdown.png).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import sim
from sim.model.conditions import slowdown_factor
from sim.model.scenario import scenario_from_dict

SLOTS = 40
RATES = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0)
CURVES = ((1.0, 1.0), (1.0, 2.0), (2.0, 4.0))


def scenario(rate: float, n: int, slowdown: dict[str, float] | None) -> sim.Scenario:
    """One step (1000 in, 100 out) on a 40-slot provider, lognormal latency of median ~2 s."""
    provider: dict[str, Any] = {
        "concurrency": SLOTS,
        "serves": {
            "big": {
                "ttft_s": {"median": 1.0, "p99": 3.0},
                "tokens_per_s": {"median": 100, "p99": 150},
            }
        },
    }
    if slowdown:
        provider["slowdown"] = slowdown
    return scenario_from_dict(
        {
            "name": "slowdown",
            "seed": 1,
            "deadline_s": 1000,
            "requests": n,
            "arrivals": {"kind": "poisson", "rate_per_s": rate},
            "models": {"big": {}},
            "providers": {"p": provider},
            "workflow": {"steps": [{"id": "s", "model": "big", "output_tokens": 100}]},
            "policies": {"wait": {"kind": "wait"}},
        }
    )


def sweep(n: int) -> pd.DataFrame:
    """p95 and the share of calls that queued, per rate, with and without slowdown."""
    rows = []
    for label, slowdown in (("slowdown a=1, k=1", {"a": 1.0, "k": 1.0}), ("no slowdown", None)):
        for rate in RATES:
            result = sim.run(scenario(rate, n, slowdown))
            rows.append(
                {
                    "curve": label,
                    "rate_per_s": rate,
                    "offered_utilisation": rate * 2.0 / SLOTS,
                    "p95_s": float(result.summary["p95_s"].iloc[0]),
                    "queued_share": float((result.calls["queue_s"] > 1e-9).mean()),
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path("results/experiments"))
    args = parser.parse_args()
    table = sweep(args.requests)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    u = np.linspace(0, 1, 101)
    for a, k in CURVES:
        left.plot(u, [slowdown_factor(a, k, x) for x in u], label=f"a={a:g}, k={k:g}")
    left.set(xlabel="utilisation (busy slots / slots)", ylabel="latency factor", title="x(1+a u^k)")
    left.legend()
    for label, part in table.groupby("curve", sort=False):
        right.plot(part["offered_utilisation"], part["p95_s"], marker="o", label=label)
        queued = part[part["queued_share"] > 0.01]
        if len(queued):
            right.axvline(queued["offered_utilisation"].min(), ls=":", color="grey")
    right.set(xlabel="offered utilisation (rate x 2 s / 40 slots)", ylabel="p95 s")
    right.set_yscale("log")
    right.set_title("p95 vs load (dotted: >1% of calls queue)")
    right.legend()
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "slowdown.png"
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


if __name__ == "__main__":
    main()
