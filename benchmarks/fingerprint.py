"""Fingerprints of every number tailsim prints: each bundled scenario's result files, hashed.

A refactor that must change no number (docs/architecture.md) is checked by running this before
and after and comparing: `python benchmarks/fingerprint.py --out before.json`, change the code,
`python benchmarks/fingerprint.py --compare before.json`. It runs every scenario of
`scenarios/` and `tests/data/` through `tailsim run` (all records, and summaries only), a
contended run on two worker processes, the default sweep, `nines` (fixed runs, no wall-time
stop), `stress`, `tune` and `synth`, and hashes the files whose bytes must not move (run.json
apart from its times and the tables' wall-clock columns).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
#: Columns that hold wall-clock seconds: dropped before hashing (they move run to run).
WALL_COLUMNS = ("seconds", "wall_s")
#: Files of a run folder whose bytes are the numbers.
RUN_FILES = ("summary.csv", "breakdown.csv", "requests.parquet", "calls.parquet",
             "timeseries.parquet", "scenario.resolved.yaml")  # fmt: skip


def digest(path: Path) -> str:
    """The hash of a result file: its bytes, or for a table with wall-clock columns its
    remaining columns' CSV."""
    if path.suffix == ".csv":
        frame = pd.read_csv(path)
        wall = [c for c in WALL_COLUMNS if c in frame.columns]
        if wall:
            data = frame.drop(columns=wall).to_csv(index=False).encode()
            return hashlib.sha256(data).hexdigest()[:16]
    if path.suffix == ".parquet":  # the table, not the writer's metadata
        frame = pd.read_parquet(path)
        buffer = io.StringIO()
        frame.to_csv(buffer, index=False, float_format="%.17g")
        return hashlib.sha256(buffer.getvalue().encode()).hexdigest()[:16]
    # absolute file names (a trace's, in scenario.resolved.yaml) name the clone, not the numbers
    data = path.read_bytes().replace(str(ROOT).encode(), b"<ROOT>")
    return hashlib.sha256(data).hexdigest()[:16]


def tailsim(*args: str) -> None:
    """Run `tailsim ARGS` quietly; a failure stops the fingerprint with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], cwd=ROOT, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"tailsim {' '.join(args)} exited {done.returncode}:\n{done.stderr}")


def folder_digests(folder: Path, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """Digests of the result files of `folder` (those named, or every csv/parquet/yaml)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix not in (".csv", ".parquet", ".yaml", ".txt"):
            continue
        rel = str(path.relative_to(folder))
        if names is None or rel in names:
            out[rel] = digest(path)
    return out


def jobs(quick: bool) -> list[tuple[str, list[str], tuple[str, ...] | None]]:
    """(name, tailsim arguments up to --out, files to hash or None for all)."""
    scenarios = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted(
        (ROOT / "tests" / "data").glob("*.yaml")
    )
    out: list[tuple[str, list[str], tuple[str, ...] | None]] = []
    for path in scenarios:
        rel = str(path.relative_to(ROOT))
        extra = ["--requests", "4000"] if "nines" in path.name else []
        out.append((f"run {rel}", ["run", rel, "-q", *extra], RUN_FILES))
        if not quick:
            out.append((f"run {rel} --records none",
                        ["run", rel, "-q", "--records", "none", *extra], RUN_FILES))  # fmt: skip
    out.append(("run tpm-saturation -e processes -w 2",
                ["run", "scenarios/tpm-saturation.yaml", "-q", "-e", "processes", "-w", "2"],
                RUN_FILES))  # fmt: skip
    out.append(("sweep default", ["sweep", "scenarios/default.yaml", "--requests", "400"], None))
    out.append(("nines default",
                ["nines", "scenarios/nines.yaml", "--budget-s", "100000",
                 "--target-rel-error", "0.5", "--no-plot"], None))  # fmt: skip
    out.append(("stress retry-storm",
                ["stress", "scenarios/retry-storm.yaml", "--duration", "60", "--multiplier", "3",
                 "--no-plot"], None))  # fmt: skip
    return out


def fingerprint(quick: bool) -> dict[str, dict[str, str]]:
    """Every job's digests."""
    result: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, args, names) in enumerate(jobs(quick)):
            began = time.perf_counter()
            out = Path(tmp) / f"job{k}"
            tailsim(*args, "--out", str(out))
            result[name] = folder_digests(out, names)
            print(f"{name}: {len(result[name])} files, {time.perf_counter() - began:.1f} s",
                  file=sys.stderr)  # fmt: skip
        tuned = Path(tmp) / "tuned.yaml"
        tailsim("tune", "scenarios/quality-floor.yaml", "--out", str(tuned), "--requests", "300",
                "-q")  # fmt: skip
        result["tune quality-floor"] = {"tuned.yaml": digest(tuned)}
        trace = Path(tmp) / "trace.csv"
        tailsim("synth", "scenarios/default.yaml", "--out", str(trace), "--requests", "300")
        result["synth default"] = {"trace.csv": digest(trace)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the fingerprints to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with fingerprints from this file")
    parser.add_argument("--quick", action="store_true", help="records all only (half the time)")
    args = parser.parse_args()
    found = fingerprint(args.quick)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    if args.compare:
        before = json.loads(args.compare.read_text())
        moved = [
            f"{job}: {file}"
            for job, files in found.items()
            for file, value in files.items()
            if job in before and before[job].get(file) not in (None, value)
        ]
        missing = [job for job in before if job not in found]
        for line in moved:
            print(f"moved: {line}")
        print(f"{len(moved)} files moved of {sum(len(f) for f in found.values())}; "
              f"{len(missing)} jobs missing")  # fmt: skip
        raise SystemExit(1 if moved else 0)


if __name__ == "__main__":
    main()
