"""Experiment: after a stream breaks or is cut mid-answer, is resuming (`resume: true`, the text
received sent back as prefill, only the rest asked for) cheaper and faster than starting over?

One step of 2000 input tokens on the bundled `direct` serving of `big` (first token median
0.8 s, speed median 60 tokens/s, a 3% stall of median 30 s), prefill 0.2 s per 1000 input
tokens (`ttft_s_per_ktok`, so a resumed call's first token is later by what it sends back),
prices 2.5 / 10 USD per million input / output tokens, `billing.cancelled: elapsed`, deadline
5 s + 1.5x the median generation time. Two sweeps over the answer length L, each policy `wait`
with 2 retries, off vs on (the same requests and draws: paired):
1. `mid_stream_error_rate` r in {0.02, 0.1, 0.3} (the stall left where it is, no stream cut);
2. no breaks, an `idle_timeout_s: 5` cut of the stalls.

Prints per point and policy: hit rate, its paired difference on - off with the standard error
of the paired mean, cost per success, p50 and p99 latency of the answered requests (the hit
rate counts the rest), billed output and input tokens per request.

Run: `python experiments/resume.py [--requests N] [--seed S]` (default 10,000 requests per
point, seed 11; about 30 s on one core: both keys run on the event engine only).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from _common import DIRECT_BIG, chain

import sim

LENGTHS = (250, 1000, 4000)
BREAK_RATES = (0.02, 0.1, 0.3)
PREFILL_S_PER_KTOK = 0.2
IDLE_S = 5.0


def point(
    rate: float, length: int, idle: float | None, requests: int, seed: int
) -> list[dict[str, Any]]:
    """One point (break rate, answer length, idle cut): off and on, with the paired margin."""
    serving = {**DIRECT_BIG, "ttft_s_per_ktok": PREFILL_S_PER_KTOK, "mid_stream_error_rate": rate}
    cuts = {} if idle is None else {"idle_timeout_s": idle}
    policies = {
        "off": {"kind": "wait", "retries": 2, **cuts},
        "on": {"kind": "wait", "retries": 2, "resume": True, **cuts},
    }
    scenario = chain(
        "resume",
        1,
        serving,
        policies,
        deadline_s=5.0 + 1.5 * length / 60.0,
        output_tokens=length,
        seed=seed,
        extra={"requests": requests, "billing": {"cancelled": "elapsed"}},
    )
    result = sim.run(scenario)
    req = result.requests
    ok = {
        p: req[req["policy"] == p].sort_values("request_id")["ok"].to_numpy(float) for p in policies
    }
    diff = ok["on"] - ok["off"]
    margin, se = float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))
    calls = result.calls
    rows = []
    for row in result.summary.itertuples():
        mine = calls[calls["policy"] == row.policy]
        answered = req.loc[(req["policy"] == row.policy) & req["ok"], "latency_s"]
        p50, p99 = np.quantile(answered.to_numpy(float), [0.5, 0.99])
        rows.append(
            {
                "r": rate,
                "cut": "-" if idle is None else f"idle {idle:g}s",
                "L": length,
                "policy": row.policy,
                "hit": row.hit_rate,
                "d_hit": margin if row.policy == "on" else math.nan,
                "se": se if row.policy == "on" else math.nan,
                "usd_per_success": row.cost_per_success_usd,
                "p50": float(p50),
                "p99": float(p99),
                "out_per_req": mine["output_tokens"].sum() / requests,
                "in_per_req": mine["input_tokens"].sum() / requests,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    rows = [
        row
        for idle, rates in ((None, BREAK_RATES), (IDLE_S, (0.0,)))
        for rate in rates
        for length in LENGTHS
        for row in point(rate, length, idle, args.requests, args.seed)
    ]
    print(f"resume off vs on, {args.requests:,} requests per point, seed {args.seed}")
    head = (
        f"{'r':>5} {'cut':>9} {'L':>5} {'policy':>6} {'hit':>7} {'on-off':>8} {'SE':>7} "
        f"{'$/success':>10} {'p50 s':>7} {'p99 s':>7} {'out/req':>8} {'in/req':>8}"
    )
    print(head)
    for x in rows:
        d = "" if np.isnan(x["d_hit"]) else f"{x['d_hit']:+8.4f} {x['se']:7.4f}"
        print(
            f"{x['r']:5.2f} {x['cut']:>9} {x['L']:5d} {x['policy']:>6} {x['hit']:7.4f} "
            f"{d:>16} {x['usd_per_success']:10.5f} {x['p50']:7.2f} {x['p99']:7.2f} "
            f"{x['out_per_req']:8.0f} {x['in_per_req']:8.0f}"
        )


if __name__ == "__main__":
    main()
