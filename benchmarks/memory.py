"""Peak memory of `tailsim run` keeping summaries only: flat in the number of calls.

Run from the repository root: `python benchmarks/memory.py [--requests 100000,1000000]
[--scenario FILE] [--records none] [-p NAME ...]` (about 3 min for the defaults on 2 shared
cores). Each size is a fresh `tailsim run` process (the command a user types, figure included),
and its own peak resident set size is the kernel's VmHWM for it as it exits, so one size's peak
never hides in another's, nor the benchmark's own memory in the run's. Target (see
docs/performance.md): the default scenario, all five policies, 1,000,000 requests, under 1 GiB.
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


#: Runs the CLI and, however it exits, writes this process's peak RSS (VmHWM, KiB) to argv[1].
#: VmHWM belongs to the memory image since `exec`: the kernel's ru_maxrss would also count the
#: forking parent's pages (a benchmark holding big arrays would read as the child's peak).
_WRAPPER = """
import sys
out = sys.argv.pop(1)
try:
    from sim.cli import main
    main(args=sys.argv[1:], prog_name="tailsim")
finally:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(out, "w") as sink:
        sink.write(peak)
"""


def peak_rss(args: list[str]) -> tuple[int, float, int]:
    """(peak RSS in bytes, wall seconds, exit status) of `tailsim` run with `args`, in a fresh
    process (Linux: its VmHWM)."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "peak"
        done = subprocess.run(
            [sys.executable, "-c", _WRAPPER, str(report), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        if done.returncode:
            sys.stderr.write(done.stderr.decode())
        peak = int(report.read_text()) * 1024 if report.is_file() else 0
    return peak, time.perf_counter() - started, done.returncode


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
