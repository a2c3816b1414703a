"""Engine overhead: tailsim's simulated calls per second against a bare simpy loop.

Run: `python benchmarks/engine.py [--requests N] [--repeat R]`. Not part of the test run.
`python benchmarks/engine.py --profile wait` instead profiles the engine (simulation and tables,
cProfile) on one run of that policy and prints the 25 functions with the most own time.

For the `wait` and `race` policies of the bundled default scenario it times tailsim's engine
(the simulation only, then with the tables built), then, in the same process, a bare simpy
model doing the same number of Resource requests and timeouts (ten sequential steps per request;
for race, two attempts per step with the loser interrupted). The ratio is our overhead.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import time
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

import sim
from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from sim.policy.build import build_policy
from sim.study.pilot import prepare


def tailsim_rate(scenario: sim.Scenario, policy: str, n: int) -> tuple[int, float, float]:
    """(calls, seconds of simulation, seconds including the tables) for one policy."""
    plan, _ = prepare(compile_scenario(scenario))
    streams = Streams(scenario.seed, "main")
    arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    runtime = build_policy(
        policy,
        scenario.policies[policy],
        plan.routes,
        plan.workflow.steps,
        dict(plan.policies[policy].thresholds),
    )
    simulation = Simulation(plan, runtime, bank, streams)
    started = time.perf_counter()
    records = simulation.run(arrivals)
    simulated = time.perf_counter() - started
    requests_frame(records)
    calls_frame(records)
    return len(records.calls), simulated, time.perf_counter() - started


def bare_simpy_rate(n: int, steps: int, attempts: int, seed: int) -> tuple[int, float]:
    """(calls, seconds) of a bare simpy model: Poisson arrivals, `steps` sequential steps, each
    `attempts` Resource requests + timeouts at once; the first to finish wins, losers are
    interrupted."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(2.0, n).tolist()
    durations = rng.lognormal(np.log(6.0), 0.5, n * steps * attempts).tolist()
    env = simpy.Environment()
    slots = simpy.Resource(env, capacity=512)
    calls = 0

    def attempt(duration: float) -> Generator[simpy.Event, Any, None]:
        nonlocal calls
        calls += 1
        with slots.request() as slot:
            yield slot
            with contextlib.suppress(simpy.Interrupt):
                yield env.timeout(duration)

    def request(index: int) -> Generator[simpy.Event, Any, None]:
        base = index * steps * attempts
        for step in range(steps):
            first = base + step * attempts
            if attempts == 1:
                yield from attempt(durations[first])
                continue
            racers = [env.process(attempt(durations[first + j])) for j in range(attempts)]
            yield env.any_of(racers)
            for racer in racers:
                if racer.is_alive:
                    racer.interrupt()

    def arrivals() -> Generator[simpy.Event, Any, None]:
        for index, gap in enumerate(gaps):
            yield env.timeout(gap)
            env.process(request(index))

    env.process(arrivals())
    started = time.perf_counter()
    env.run()
    return calls, time.perf_counter() - started


def main() -> None:
    """Print calls per second of tailsim and of bare simpy, and their ratio, per policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument("--profile", metavar="POLICY", help="profile one run of POLICY instead")
    args = parser.parse_args()
    scenario = sim.load_scenario()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(tailsim_rate, scenario, args.profile, args.requests)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    print(f"default scenario '{scenario.name}', {args.requests} requests, best of {args.repeat}")
    print(
        f"{'policy':8} {'calls':>8} {'tailsim calls/s':>16} {'(with tables)':>14} "
        f"{'bare simpy calls/s':>19} {'overhead':>9}"
    )
    for policy, attempts in (("wait", 1), ("race", 2)):
        ours = min(
            (tailsim_rate(scenario, policy, args.requests) for _ in range(args.repeat)),
            key=lambda r: r[1],
        )
        bare = min(
            (bare_simpy_rate(args.requests, 10, attempts, 1) for _ in range(args.repeat)),
            key=lambda r: r[1],
        )
        ours_rate, tables_rate, bare_rate = ours[0] / ours[1], ours[0] / ours[2], bare[0] / bare[1]
        print(
            f"{policy:8} {ours[0]:8d} {ours_rate:16,.0f} {tables_rate:14,.0f} "
            f"{bare_rate:19,.0f} {bare_rate / ours_rate:8.2f}x"
        )


if __name__ == "__main__":
    main()
