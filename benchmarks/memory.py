"""Peak memory of `tailsim run` keeping summaries only: flat in the number of calls.

Run from the repository root: `python benchmarks/memory.py [--requests 100000,1000000]
[--scenario FILE] [--records none] [-p NAME ...]` (about 3 min for the defaults on 2 shared
cores). Each size is a fresh `tailsim run` process (the command a user types, figure included),
and its own peak resident set size is read from the kernel when it exits (`os.wait4`), so one
size's peak never hides in another's. Target (issue 12): the default scenario, all five policies,
1,000,000 requests, under 1 GiB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

TARGET_BYTES = 2**30


def peak_rss(args: list[str]) -> tuple[int, float, int]:
    """(peak RSS in bytes, wall seconds, exit status) of `tailsim` run with `args`."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        sys.stderr.write(process.stderr.read().decode() if process.stderr else "")
    return usage.ru_maxrss * 1024, time.perf_counter() - started, process.returncode


def main() -> None:
    """Measure each size and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="100000,1000000", help="sizes, comma-separated")
    parser.add_argument("--scenario", help="scenario file (default: the bundled one)")
    parser.add_argument("--records", default="none", choices=["none", "requests", "all"])
    parser.add_argument("-p", "--policy", action="append", default=[])
    args = parser.parse_args()
    sizes = [int(s) for s in args.requests.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    header = f"{'requests':>10} {'calls':>12} {'peak RSS MiB':>13} {'bytes/call':>11} {'wall s':>7}"
    print(header)
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            command = ["run", "--requests", str(n), "--records", args.records, "-q"]
            command += ["--out", str(out)]
            command += [args.scenario] if args.scenario else []
            for policy in args.policy:
                command += ["-p", policy]
            rss, wall, status = peak_rss(command)
            if status:
                print(f"{n:>10} failed with exit {status}")
                continue
            summary = pd.read_csv(out / "summary.csv")
            calls = round(float((summary["calls_per_request"] * summary["requests"]).sum()))
        met = "" if rss < TARGET_BYTES else "  (over 1 GiB)"
        print(f"{n:>10,} {calls:>12,} {rss / 2**20:>13,.0f} {rss / calls:>11.1f} {wall:>7.0f}{met}")


if __name__ == "__main__":
    main()
