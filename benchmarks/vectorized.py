"""Vectorized engine speed: runs (requests) per second against a raw numpy model, same process.

Run: `python benchmarks/vectorized.py [--requests N] [--repeat R] [--client-rules [--des N]]`.
Not part of the test run.

For the `wait` and `race` policies of the bundled default scenario (ten sequential steps) it
times the vectorized engine from fresh draws (uniforms drawn, transformed, every rule and call
recorded), alone and with the requests and calls tables built; then a raw numpy model of the same
ten steps with the same lognormal draws (first token, speed, stalls) and no bookkeeping: each
step's time summed (wait), or the faster of two attempts taken (race). The ratio is our cost.

`--client-rules` times the same scenario with `sdk: openai` and an `overhead_s` on both
providers (the client's retries, waits and overhead, run per call) instead, on both engines:
the vectorized engine's runs/s beside the event engine's (on `--des` requests, 4,000 by default,
engine and tables).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import ndtri

import sim
from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine.simulation import Simulation
from sim.engine.vector_tables import tables
from sim.engine.vectorized import simulate
from sim.model.arrivals import arrival_times
from sim.model.latency import LogNormal
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from sim.policy.build import build_policy
from sim.study.pilot import prepare


def vectorized_seconds(scenario: sim.Scenario, policy: str, n: int) -> tuple[float, float]:
    """(seconds of the engine, seconds with the tables) for one policy, from fresh draws."""
    plan, _ = prepare(compile_scenario(scenario))
    streams = Streams(scenario.seed, "main")
    arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    runtime = build_policy(
        policy,
        scenario.policies[policy],
        plan.routes,
        plan.workflow.steps,
        dict(plan.policies[policy].thresholds),
    )
    started = time.perf_counter()
    bank = CallDrawBank(streams.child("calls"), n)
    runs, calls = simulate(plan, runtime, bank, arrivals)
    engine = time.perf_counter() - started
    tables(plan, policy, runs, calls)
    return engine, time.perf_counter() - started


def raw_numpy_seconds(scenario: sim.Scenario, n: int, attempts: int, seed: int) -> float:
    """Seconds of a bare ten-step model: per step and attempt a block of uniforms, lognormal
    first token and speed, stalls; a step takes its attempt's time (or the fastest of them)."""
    serving = scenario.providers["direct"].serves["big"]
    ttft = LogNormal.from_median_p99(serving.ttft_s.median, serving.ttft_s.p99)
    speed = LogNormal.from_median_p99(serving.tokens_per_s.median, serving.tokens_per_s.p99)
    assert serving.stall is not None
    stall = LogNormal.from_median_p99(serving.stall.extra_s.median, serving.stall.extra_s.p99)
    steps = scenario.workflow.steps
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    clock = np.cumsum(rng.exponential(2.0, n))
    for spec in steps:
        best = np.full(n, np.inf)
        for _ in range(attempts):
            u = rng.random((n, 5))
            took = np.exp(ttft.mu + ttft.sigma * ndtri(u[:, 0]))
            took += spec.output_tokens / np.exp(speed.mu + speed.sigma * ndtri(u[:, 1]))
            took += np.where(
                u[:, 2] < serving.stall.probability,
                np.exp(stall.mu + stall.sigma * ndtri(u[:, 3])),
                0.0,
            )
            best = np.minimum(best, took)
        clock += best
    return time.perf_counter() - started


def with_client_rules(scenario: sim.Scenario) -> sim.Scenario:
    """The scenario with `sdk: openai` and 30 ms (p99 90 ms, a quarter held) of overhead on
    every provider."""
    data = scenario.model_dump(exclude_defaults=True, mode="json")
    for provider in data["providers"].values():
        provider |= {"sdk": "openai", "overhead_held": 0.25}
        provider["overhead_s"] = {"median": 0.03, "p99": 0.09}
    return scenario_from_dict(data)


def event_engine_seconds(scenario: sim.Scenario, policy: str, n: int) -> float:
    """Seconds of the event engine with its tables for one policy, from fresh draws."""
    plan, _ = prepare(compile_scenario(scenario))
    streams = Streams(scenario.seed, "main")
    arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    runtime = build_policy(
        policy,
        scenario.policies[policy],
        plan.routes,
        plan.workflow.steps,
        dict(plan.policies[policy].thresholds),
    )
    started = time.perf_counter()
    bank = CallDrawBank(streams.child("calls"), n)
    records = Simulation(plan, runtime, bank, streams).run(arrivals)
    requests_frame(records)
    calls_frame(records)
    return time.perf_counter() - started


def client_rules(scenario: sim.Scenario, n: int, des: int, repeat: int) -> None:
    """Print runs per second of both engines on the scenario with client rules."""
    scenario = with_client_rules(scenario)
    print(
        f"default scenario '{scenario.name}' with sdk: openai and overhead_s, best of {repeat}; "
        f"vectorized {n} requests, event engine {des}"
    )
    print(
        f"{'policy':9} {'vectorized runs/s':>18} {'(with tables)':>14} "
        f"{'event engine runs/s':>20} {'speed-up':>9}"
    )
    for policy in scenario.policies:
        ours = [vectorized_seconds(scenario, policy, n) for _ in range(repeat)]
        engine, with_tables = min(o[0] for o in ours), min(o[1] for o in ours)
        slow = min(event_engine_seconds(scenario, policy, des) for _ in range(repeat))
        print(
            f"{policy:9} {n / engine:18,.0f} {n / with_tables:14,.0f} {des / slow:20,.0f} "
            f"{(n / with_tables) / (des / slow):8.1f}x"
        )


def main() -> None:
    """Print runs per second of the vectorized engine and of raw numpy, and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument(
        "--client-rules", action="store_true", help="sdk: openai and overhead_s, both engines"
    )
    parser.add_argument("--des", type=int, default=4_000, help="event engine requests")
    args = parser.parse_args()
    scenario = sim.load_scenario()
    n = args.requests
    if args.client_rules:
        client_rules(scenario, n, args.des, args.repeat)
        return
    print(f"default scenario '{scenario.name}', {n} requests, best of {args.repeat}")
    print(
        f"{'policy':7} {'vectorized runs/s':>18} {'(with tables)':>14} {'raw numpy runs/s':>17} "
        f"{'ratio':>6} {'(with tables)':>14}"
    )
    for policy, attempts in (("wait", 1), ("race", 2)):
        ours = [vectorized_seconds(scenario, policy, n) for _ in range(args.repeat)]
        engine, with_tables = min(o[0] for o in ours), min(o[1] for o in ours)
        raw = min(raw_numpy_seconds(scenario, n, attempts, 1) for _ in range(args.repeat))
        print(
            f"{policy:7} {n / engine:18,.0f} {n / with_tables:14,.0f} {n / raw:17,.0f} "
            f"{raw / engine:6.0%} {raw / with_tables:14.0%}"
        )


if __name__ == "__main__":
    main()
