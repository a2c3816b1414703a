"""Benchmark: the default scenario's 8-point sweep, inline against processes (and dask).

Prints the wall time of each executor on the same sweep and the speed-up over inline, and
checks the pooled summary is byte-identical on each. Run from the repository root:

    python benchmarks/sweep.py [--workers 2] [--requests N] [--dask]

Speed-up needs the cores to be free: on a machine shared with other jobs the numbers drop.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from sim.cli import main as cli


def timed_sweep(out: Path, executor: str, workers: int, requests: int | None) -> float:
    """Seconds for `tailsim sweep` of the bundled default into `out`."""
    args = ["sweep", "--out", str(out), "-q", "--no-plot", "-e", executor, "-w", str(workers)]
    if requests is not None:
        args += ["-n", str(requests)]
    began = time.perf_counter()
    result = CliRunner().invoke(cli, args)
    wall = time.perf_counter() - began
    if result.exit_code != 0:
        raise SystemExit(f"{executor} failed: {result.output}{result.exception}")
    return wall


def main() -> None:
    """Run the default sweep on each executor and print the wall times side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--dask", action="store_true", help="also time the dask LocalCluster")
    args = parser.parse_args()
    executors = ["inline", "processes"] + (["dask"] if args.dask else [])
    with tempfile.TemporaryDirectory() as tmp:
        walls, tables = {}, {}
        for executor in executors:
            out = Path(tmp) / executor
            walls[executor] = timed_sweep(out, executor, args.workers, args.requests)
            tables[executor] = (out / "summary.csv").read_bytes()
    load = os.getloadavg()[0]
    print(
        f"default sweep (8 points), {args.workers} workers; load average {load:.1f} on "
        f"{os.cpu_count()} cores (a speed-up needs idle cores)"
    )
    for executor in executors:
        same = "identical" if tables[executor] == tables["inline"] else "DIFFERENT"
        print(
            f"  {executor:>9}: {walls[executor]:6.1f} s  "
            f"speed-up {walls['inline'] / walls[executor]:.2f}x  summary.csv {same}"
        )


if __name__ == "__main__":
    main()
