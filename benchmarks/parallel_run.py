"""Benchmark: one contended run's policies inline against side by side on worker processes.

Times `tailsim run scenarios/tpm-saturation.yaml -n N` (four policies on one shared TPM quota:
the event engine only) as the command line runs it, inline and with `-e processes -w W`, checks
that every file is byte-identical (run.json apart from its time, wall times and executor), and
prints both times and their ratio. Run from the repository root:

    python benchmarks/parallel_run.py [--requests 200000] [--workers 2] [--repeat 1] [--dask]

The ratio needs idle cores: with other jobs on them both runs slow down, the parallel one more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCENARIO = "scenarios/tpm-saturation.yaml"
#: run.json fields that say when and where a run ran, not what it computed.
RUN_SPECIFIC = ("finished_utc", "wall_s", "executor", "workers")


def timed_run(out: Path, requests: int, executor: str, workers: int, scenario: str) -> float:
    """Seconds for `tailsim run` of `scenario` into `out` (a fresh process, as a user runs it)."""
    command = [sys.executable, "-m", "sim.cli", "run", scenario, "-n", str(requests), "-q"]
    command += ["--out", str(out), "-e", executor]
    if executor != "inline":
        command += ["-w", str(workers)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{executor} failed ({done.returncode}): {done.stderr}")
    return wall


def differences(a: Path, b: Path) -> list[str]:
    """The files that differ between two results folders (run.json without its run-specific
    fields); empty when they hold the same bytes."""
    names = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    names |= {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    different = []
    for name in sorted(names):
        left, right = a / name, b / name
        if not (left.is_file() and right.is_file()):
            different.append(f"{name} (only in one)")
        elif name == Path("run.json"):
            if _comparable(left) != _comparable(right):
                different.append(str(name))
        elif left.read_bytes() != right.read_bytes():
            different.append(str(name))
    return different


def _comparable(path: Path) -> dict:
    meta = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in meta.items() if k not in RUN_SPECIFIC}


def load() -> str:
    """The 1, 5 and 15 minute load averages, and the core count."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def compare(
    requests: int, workers: int, repeat: int, executors: list[str], scenario: str = SCENARIO
) -> tuple[dict[str, list[float]], list[str]]:
    """Each executor's wall times (`repeat` rounds, the order turned round each round) and
    the files that differed from the inline run's; prints each run's per-policy seconds (its
    run.json `wall_s`: in the workers for processes and dask)."""
    walls: dict[str, list[float]] = {e: [] for e in ["inline", *executors]}
    different: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            order = ["inline", *executors]
            for executor in order if r % 2 == 0 else order[::-1]:
                out = Path(tmp) / f"{executor}-{r}"
                walls[executor].append(timed_run(out, requests, executor, workers, scenario))
                parts = json.loads((out / "run.json").read_text(encoding="utf-8"))["wall_s"]
                print(f"  {executor} round {r}: {walls[executor][-1]:.1f} s; per part, s: "
                      + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))  # fmt: skip
            for executor in executors:
                found = differences(Path(tmp) / f"inline-{r}", Path(tmp) / f"{executor}-{r}")
                different += [f"{executor}: {name}" for name in found]
    return walls, different


def main() -> None:
    """Time the run on each executor and print the times, the ratio and the byte check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="rounds (medians shown)")
    parser.add_argument("--dask", action="store_true", help="also time a dask LocalCluster")
    parser.add_argument("--scenario", default=SCENARIO)
    args = parser.parse_args()
    executors = ["processes"] + (["dask"] if args.dask else [])
    print(f"before: {load()}")
    walls, different = compare(args.requests, args.workers, args.repeat, executors, args.scenario)
    print(f"after:  {load()}")
    inline = statistics.median(walls["inline"])
    print(f"tailsim run {args.scenario} -n {args.requests}, {args.workers} workers:")
    print(f"  {'inline':>9}: {inline:7.1f} s  (all: {[round(w, 1) for w in walls['inline']]})")
    for executor in executors:
        wall = statistics.median(walls[executor])
        print(
            f"  {executor:>9}: {wall:7.1f} s  ratio {wall / inline:.2f} of inline (target <= "
            f"0.60)  (all: {[round(w, 1) for w in walls[executor]]})"
        )
    print("files: " + ("identical to inline" if not different else f"DIFFERENT: {different}"))


if __name__ == "__main__":
    main()
