"""Theory checks of the workflow keys (when, repeat, loop, map), for `tailsim validate`.

Each row is (name, theory, simulated, standard error, detail), held by `sim.study.validation`
to theory +- 4 standard errors like its own rows: binomial SEs for rates, the mixture's SE for a
`when` branch's mean latency (constant latencies: only the branch's share varies). Separate from
that module only to keep both under the size limit; the engine never imports it.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from sim.analysis.analytic import (
    binomial_se,
    lognormal_sf,
    loop_success_geometric,
    loop_success_poisson,
    order_statistic_cdf,
    repeat_valid,
)
from sim.model.latency import lognormal_params
from sim.model.scenario import scenario_from_dict
from sim.plan import Plan, compile_scenario
from sim.study.runner import run

#: One row: (name, theory, simulated, standard error, detail).
Row = tuple[str, float, float, float, str]


def _seed(seed: int, check: str) -> int:
    """A seed per check, fixed by `seed` (as `sim.study.validation` derives its own)."""
    return (seed * 1_000_003 + zlib.crc32(check.encode("utf-8"))) % (2**31)


def _plan(name: str, steps: list[dict[str, Any]], ttft: dict[str, Any], **rates: float) -> Plan:
    """One uncontended provider serving model `m` (100 tokens at 100 tokens/s: 1 s after the
    first token), policy `wait` without retries, no deadline in practice."""
    serving = {"ttft_s": ttft, "tokens_per_s": {"dist": "constant", "value": 100.0}, **rates}
    for s in steps:
        s.setdefault("model", "m")
        s.setdefault("output_tokens", 100)
    data = {
        "name": name,
        "deadline_s": 1e9,
        "arrivals": {"kind": "poisson", "rate_per_s": 0.01},
        "models": {"m": {"price_per_mtok": {"input": 1.0, "output": 1.0}}},
        "providers": {"p": {"serves": {"m": serving}}},
        "workflow": {"steps": steps},
        "policies": {"wait": {"kind": "wait"}},
    }
    return compile_scenario(scenario_from_dict(data, source=f"<validation:{name}>"))


_CONSTANT = {"dist": "constant", "value": 1.0}


def workflow_rows(size: int, seed: int) -> list[Row]:
    """The rows: a `when` branch's mixture, repeat's 1 - r^K, a geometric and a poisson+1
    loop's E[q^N], a join-all map's F^n and a first-K map's K-th order statistic."""
    n = max(size // 4, 100)
    rows: list[Row] = []
    # when: a (2 s), the branch c (2 s) with probability P, b (2 s): latency 4 or 6 s
    p = 0.3
    steps = [
        {"id": "a"},
        {"id": "c", "after": ["a"], "when": {"probability": p}},
        {"id": "b", "after": ["c"]},
    ]
    result = run(_plan("when", steps, _CONSTANT), requests=n, seed=_seed(seed, "when"))
    latency = result.requests["latency_s"].to_numpy(float)
    se = 2.0 * math.sqrt(p * (1 - p) / n)
    rows.append(
        (
            "when mean latency P*6+(1-P)*4",
            p * 6 + (1 - p) * 4,
            float(latency.mean()),
            se,
            f"P={p:g}, constant 2 s steps, {n} requests, the share's SE times 2 s",
        )
    )
    # repeat: junk at r caught (no validator), at most K asks
    r, asks = 0.4, 3
    steps = [{"id": "s", "repeat": {"until": "valid", "max": asks}}]
    result = run(
        _plan("repeat", steps, _CONSTANT, invalid_rate=r), requests=n, seed=_seed(seed, "repeat")
    )
    theory = repeat_valid(r, asks)
    rows.append(
        (
            "repeat until valid 1-r^K",
            theory,
            float(result.requests["ok"].mean()),
            binomial_se(theory, n),
            f"r={r:g}, K={asks}, {n} requests, binomial SE",
        )
    )
    # loops of q-reliable steps: E[q^N]
    q = 0.9
    for law, mean, closed in (
        ("geometric", 3.0, loop_success_geometric),
        ("poisson", 2.0, loop_success_poisson),
    ):
        steps = [{"id": "s", "loop": {"count": {"dist": law, "mean": mean}}}]
        plan = _plan(f"loop-{law}", steps, _CONSTANT, error_rate=1 - q)
        result = run(plan, requests=n, seed=_seed(seed, f"loop-{law}"))
        theory = closed(q, mean)
        rows.append(
            (
                f"{law} loop E(q^N)",
                theory,
                float(result.requests["ok"].mean()),
                binomial_se(theory, n),
                f"q={q:g}, mean {mean:g}, {n} requests, binomial SE",
            )
        )
    # maps of 4 copies, lognormal first token: P(latency <= t) of the max and the 2nd fastest
    median, p99, copies, t = 1.0, 5.0, 4, 3.0
    mu, sigma = lognormal_params(median, p99)
    f = 1.0 - float(np.asarray(lognormal_sf(mu, sigma, t - 1.0)))
    ttft = {"dist": "lognormal", "median": median, "p99": p99}
    for join, k in (("all", copies), ({"first": 2}, 2)):
        count = {"dist": "constant", "value": copies}
        steps = [{"id": "s", "map": {"count": count, "join": join}}]
        result = run(_plan(f"map-{k}", steps, ttft), requests=n, seed=_seed(seed, f"map-{k}"))
        hit = float((result.requests["latency_s"].to_numpy(float) <= t).mean())
        theory = order_statistic_cdf(f, copies, k)
        joined = "all" if k == copies else f"first {k}"
        rows.append(
            (
                f"map of {copies} join {joined} P(<= {t:g} s)",
                theory,
                hit,
                binomial_se(theory, n),
                f"ttft lognormal median {median:g} p99 {p99:g}, {n} requests, binomial SE",
            )
        )
    return rows
