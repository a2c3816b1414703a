"""The event engine of two source trees, paired: which is faster, and by how much (CPU and wall).

Run: `python benchmarks/engine_ab.py OLD NEW [--pairs 10] [--repeat 3]`, where OLD and NEW are
source trees (e.g. `git archive main | tar -x -C /tmp/old`). Not part of the test run.

Each pair runs OLD and NEW in fresh processes back to back (alternating which goes first): the
default scenario's `wait` and `race` policies, simulation only, best of `--repeat`, then the
bare simpy model of `benchmarks/engine.py` in the same process. CPU time (`process_time`) is
reported beside wall time because on shared cores another job's load stretches wall time far
more than the process's own CPU time. It prints each side's median calls/s, its bare simpy over
tailsim ratio, and the median (and range) of the pairs' speed ratios NEW / OLD.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLICIES = (("wait", 1), ("race", 2))


def worker(tree: str, repeat: int, n: int) -> dict[str, Any]:
    """Time the engine of `tree` (imported from it) and the bare model; a JSON-able record."""
    sys.path[:0] = [tree, str(Path(tree) / "benchmarks")]
    import engine as bench  # noqa: PLC0415 - that tree's benchmarks/engine.py

    import sim  # noqa: PLC0415 - that tree's package
    from sim.engine.simulation import Simulation  # noqa: PLC0415
    from sim.model.arrivals import arrival_times  # noqa: PLC0415
    from sim.model.streams import CallDrawBank, Streams  # noqa: PLC0415
    from sim.plan import compile_scenario  # noqa: PLC0415
    from sim.policy.build import build_policy  # noqa: PLC0415
    from sim.study.pilot import prepare  # noqa: PLC0415

    scenario = sim.load_scenario()
    plan, _ = prepare(compile_scenario(scenario))
    record: dict[str, Any] = {"sim": sim.__file__}
    for policy, attempts in POLICIES:
        times = []
        for _ in range(repeat):
            streams = Streams(scenario.seed, "main")
            arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
            bank = CallDrawBank(streams.child("calls"), n)
            spec = scenario.policies[policy]
            thresholds = dict(plan.policies[policy].thresholds)
            runtime = build_policy(policy, spec, plan.routes, plan.workflow.steps, thresholds)
            simulation = Simulation(plan, runtime, bank, streams)
            cpu, wall = time.process_time(), time.perf_counter()
            calls = len(simulation.run(arrivals).calls)
            times.append((time.process_time() - cpu, time.perf_counter() - wall))
            del simulation
        bare = []
        for _ in range(repeat):
            cpu = time.process_time()
            bare_calls, wall = bench.bare_simpy_rate(n, 10, attempts, 1)
            bare.append((time.process_time() - cpu, wall))
        record[policy] = {
            "cpu": calls / min(t[0] for t in times),
            "wall": calls / min(t[1] for t in times),
            "bare_cpu": bare_calls / min(t[0] for t in bare),
            "bare_wall": bare_calls / min(t[1] for t in bare),
        }
    return record


def main() -> None:
    """Run the pairs and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many per process")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(str(Path(args.old).resolve()), args.repeat, args.requests)))
        return
    trees = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    loads = []
    for i in range(args.pairs):
        for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
            loads.append(os.getloadavg()[0])
            command = [sys.executable, __file__, trees[side], "--worker"]
            command += ["--repeat", str(args.repeat), "--requests", str(args.requests)]
            out = subprocess.run(command, capture_output=True, text=True, check=True, cwd="/")
            record = json.loads(out.stdout)
            assert record["sim"].startswith(trees[side]), record["sim"]
            runs[side].append(record)
    print(f"{args.pairs} pairs, best of {args.repeat}, {args.requests} requests; "
          f"load average (1 min) {min(loads):.2f}-{max(loads):.2f}")  # fmt: skip
    for policy, _ in POLICIES:
        for clock in ("cpu", "wall"):
            line = [f"{policy} {clock:4}"]
            for side in ("old", "new"):
                rates = [r[policy][clock] for r in runs[side]]
                bare = [r[policy][f"bare_{clock}"] / r[policy][clock] for r in runs[side]]
                line.append(
                    f"{side} {statistics.median(rates):9,.0f} calls/s "
                    f"(bare simpy {statistics.median(bare):.2f}x)"
                )
            ratios = sorted(
                n[policy][clock] / o[policy][clock]
                for o, n in zip(runs["old"], runs["new"], strict=True)
            )
            line.append(
                f"new/old x{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})"
            )
            print(" | ".join(line))


if __name__ == "__main__":
    main()
