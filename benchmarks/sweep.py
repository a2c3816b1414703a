"""Benchmark: the default scenario's 8-point sweep, inline against processes (and dask).

Runs `tailsim sweep scenarios/default.yaml` as a user does (the console script, in a process of
its own, into a fresh folder each time so nothing is resumed), `--repeat` times per executor in
alternating order, and prints each executor's median wall time, the speed-up over inline, and
whether summary.csv is byte-identical on each. Run from the repository root:

    python benchmarks/sweep.py [--workers 2] [--repeat 3] [--requests N] [--dask]

Speed-up needs the cores to be free: on a machine shared with other jobs the numbers drop, so
the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "scenarios" / "default.yaml"


def tailsim() -> list[str]:
    """The `tailsim` console script beside this interpreter (what a user runs; its workers
    start as the user's do), else `python -m sim.cli`."""
    script = Path(sys.executable).with_name("tailsim")
    found = str(script) if script.is_file() else shutil.which("tailsim")
    return [found] if found else [sys.executable, "-m", "sim.cli"]


def timed_sweep(out: Path, executor: str, workers: int, requests: int | None) -> float:
    """Seconds for `tailsim sweep` of the default scenario into the fresh folder `out`."""
    shutil.rmtree(out, ignore_errors=True)
    args = [*tailsim(), "sweep", str(DEFAULT), "--out", str(out), "-q", "--no-plot"]
    args += ["-e", executor]
    if executor != "inline":  # inline takes no workers (tailsim refuses -w there)
        args += ["-w", str(workers)]
    if requests is not None:
        args += ["-n", str(requests)]
    began = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"{executor} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return wall


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    """Run the default sweep on each executor `--repeat` times and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--dask", action="store_true", help="also time the dask LocalCluster")
    args = parser.parse_args()
    executors = ["inline", "processes"] + (["dask"] if args.dask else [])
    before = loadavg()
    walls: dict[str, list[float]] = {e: [] for e in executors}
    same = dict.fromkeys(executors, True)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            order = executors if r % 2 == 0 else executors[::-1]
            for executor in order:
                out = Path(tmp) / f"{executor}-{r}"
                walls[executor].append(timed_sweep(out, executor, args.workers, args.requests))
            reference = (Path(tmp) / f"inline-{r}" / "summary.csv").read_bytes()
            for executor in executors:
                table = (Path(tmp) / f"{executor}-{r}" / "summary.csv").read_bytes()
                same[executor] &= table == reference
    print(
        f"default sweep (8 points), {args.workers} workers, median of {args.repeat}; load "
        f"average {before} before, {loadavg()} after, on {os.cpu_count()} cores (a speed-up "
        "needs idle cores)"
    )
    inline = statistics.median(walls["inline"])
    for executor in executors:
        median = statistics.median(walls[executor])
        runs = ", ".join(f"{w:.1f}" for w in walls[executor])
        print(
            f"  {executor:>9}: {median:6.1f} s  (runs {runs})  speed-up {inline / median:.2f}x  "
            f"summary.csv {'identical' if same[executor] else 'DIFFERENT'}"
        )


if __name__ == "__main__":
    main()
