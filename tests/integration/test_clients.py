"""Per-call overhead held on the slot in a whole run: the queue it makes is the M/D/1 queue its
service time predicts."""

from __future__ import annotations

import math

import sim
from sim.model.scenario import scenario_from_dict
from tests.helpers import scenario_dict, serving, step


def test_held_overhead_costs_capacity_as_md1_predicts() -> None:
    """One slot, Poisson arrivals at 0.6/s, 1 s of service plus 0.4 s of overhead, half held:
    an M/D/1 queue with D = 1.2 s, so the mean latency is the Pollaczek-Khinchine wait
    lam D^2 / (2 (1 - lam D)) = 1.543 s plus D plus the 0.2 s after the slot: 2.943 s (were
    nothing held, D = 1.0: 2.15 s). Fixed seed; tolerance 4 standard errors from batch means
    (50 batches of consecutive requests: queue waits are autocorrelated)."""
    lam, service, over, held = 0.6, 1.0, 0.4, 0.5
    d = service + over * held
    expected = lam * d * d / (2 * (1 - lam * d)) + d + over * (1 - held)
    data = scenario_dict(
        [step("s1")],
        {"p": {"kind": "wait"}},
        deadline_s=10_000.0,
        requests=20_000,
        arrivals={"kind": "poisson", "rate_per_s": lam},
        providers={
            "p1": {
                "concurrency": 1,
                "serves": {"big": serving(ttft=0.5, tokens_per_s=200.0)},
                "overhead_s": {"dist": "constant", "value": over},
                "overhead_held": held,
            }
        },
    )
    result = sim.run(scenario_from_dict(data), engine="des")
    latency = result.requests.sort_values("request_id")["latency_s"].to_numpy(float)
    latency = latency[1000:]  # past the empty start
    batches = latency[: len(latency) // 50 * 50].reshape(50, -1).mean(axis=1)
    se = batches.std(ddof=1) / math.sqrt(len(batches))
    assert abs(latency.mean() - expected) < 4 * se, (latency.mean(), expected, se)
    assert se < 0.1  # tight enough to tell it from the unheld 2.15 s
