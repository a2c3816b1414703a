"""Hold tailsim to a real client: for each load, start the fake server, drive it with the real
`openai` SDK (and a LiteLLM Router at the quota-bound load), measure the per-call overhead from
the two logs, replay the run's own arrivals in tailsim with that overhead and the SDK preset,
and print real vs simulated with 95% block-bootstrap intervals.

    python -m experiments.real_client            # about 8 minutes; results/real_client/<time>/

Needs the optional extra: pip install -e ".[real]".
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

import sim
from experiments.real_client import compare, driver, litellm_setup
from experiments.real_client import scenario as scen


@dataclass(frozen=True)
class Load:
    """One load level: arrival rate and the deployments' token quotas (none: unlimited)."""

    name: str
    rate_per_s: float
    tpm: float | None = None


#: With 12 slots and a mean service of 0.336 s, 3 calls per request: light (slots ~21% busy),
#: near the slot limit (~80%), quota-bound (120,000 tokens/min admit 2/3 of the 250-token calls).
LOADS = (
    Load("light", 2.5),
    Load("near-slots", 9.5),
    Load("quota", 4.0, tpm=120_000),
)


#: The two ways tailsim is run: with the SDK preset and the measured overhead, and as before
#: those keys existed (openai runs only: `sdk: {retries: 2}`, full-jitter backoff, no overhead).
PRESET = "preset+overhead"
BASELINE = "plain (no preset, no overhead)"


class Server:
    """The fake server as a subprocess (started fresh per run: empty queues, a new bucket)."""

    def __init__(
        self,
        setup: scen.Setup,
        log: Path,
        tpm: str | None,
        deployments: int,
        seed: int,
        extra: tuple[str, ...] = (),
    ):
        cmd = [
            sys.executable, "-m", "experiments.real_client.server",
            "--slots", str(setup.slots), "--median-s", str(setup.median_s),
            "--p99-s", str(setup.p99_s), "--deployments", str(deployments),
            "--seed", str(seed), "--log", str(log), "--start", "steady",
        ]  # fmt: skip
        if tpm is not None:
            cmd += ["--tpm", tpm]
        cmd += list(extra)  # e.g. the streamed answers' law (experiments.real_client.stream_run)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: S603 (ours)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"the fake server did not start: {' '.join(cmd)}")
        self.ports: dict[str, int] = json.loads(line)["ports"]
        self.log = log

    def url(self, name: str = "d0") -> str:
        """The deployment's OpenAI base URL."""
        return f"http://127.0.0.1:{self.ports[name]}/v1"

    def stop(self) -> pd.DataFrame:
        """Stop the server and return its log, one row per HTTP request."""
        self.proc.terminate()
        self.proc.wait(timeout=30)
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return pd.DataFrame(rows)


def simulate(path: Path, policy: str, n: int, reps: int) -> list[pd.DataFrame]:
    """tailsim on the scenario file, `reps` seeds on the same arrivals."""
    scenario = sim.load_scenario(path)
    out = []
    for seed in range(1, reps + 1):
        res = sim.run(scenario, requests=n, seed=seed, policies=[policy])
        out.append(compare.sim_requests(res.requests, res.calls, policy))
    return out


def one_run(
    client: str, load: Load, setup: scen.Setup, args: argparse.Namespace, folder: Path
) -> tuple[pd.DataFrame, dict]:
    """One real run and its replay: the comparison rows and what was measured."""
    folder.mkdir(parents=True, exist_ok=True)
    n = max(20, round(load.rate_per_s * args.duration_s))
    work = driver.Workload(
        load.rate_per_s, n, setup.steps, setup.deadline_s, setup.input_tokens,
        setup.max_tokens, seed=args.seed,
    )  # fmt: skip
    deployments = 2 if client == "litellm" else 1
    tpm = None
    if load.tpm is not None:
        tpm = f"{load.tpm:g}" if client == "openai" else f"{load.tpm:g},{load.tpm / 3:g}"
    seed = 10 * args.seed + [x.name for x in LOADS].index(load.name)  # fresh draws per load
    server = Server(setup, folder / "server.jsonl", tpm, deployments, seed)
    try:
        if client == "openai":
            requests, calls = asyncio.run(driver.run_openai(work, server.url()))
        else:
            config = litellm_setup.config(server.ports, load.tpm)
            requests, calls = asyncio.run(driver.run_litellm(work, config, litellm_setup.GROUP))
    finally:
        log = server.stop()
    pd.DataFrame(requests).to_csv(folder / "client_requests.csv", index=False)
    pd.DataFrame(calls).to_csv(folder / "client_calls.csv", index=False)
    real = compare.real_requests(requests, log, setup.deadline_s)
    over = compare.measure_overhead(calls, log)
    trace = scen.write_trace(folder, real["arrival_s"].to_numpy())
    ofile = scen.write_overhead(folder, over.total_s)
    name = f"real-{client}-{load.name}"
    variants: list[tuple[str, dict, str]] = []
    if client == "openai":
        data = scen.openai_scenario(setup, name, trace, load.tpm, ofile, over.held_share)
        variants.append((PRESET, data, "openai"))
        if args.baseline:
            plain = scen.openai_scenario(setup, name, trace, load.tpm, None, 0.0, presets=False)
            variants.append((BASELINE, plain, "openai"))
    else:
        data, policy = litellm_setup.scenario(setup, name, trace, load.tpm, ofile, over, folder)
        variants.append((PRESET, data, policy))
    tables = []
    for variant, data, policy in variants:
        path = scen.save(folder, data, f"scenario-{variant.split()[0]}.yaml")
        sims = simulate(path, policy, len(real), args.reps)
        table = compare.bootstrap(real, sims, n_boot=args.boot, seed=args.seed)
        table.insert(0, "tailsim", variant)
        table.insert(0, "load", load.name)
        table.insert(0, "client", client)
        tables.append(table)
    info = {
        "client": client,
        "load": load.name,
        "requests": len(real),
        "overhead_median_ms": 1e3 * float(np.median(over.total_s)),
        "overhead_p99_ms": 1e3 * float(np.quantile(over.total_s, 0.99)),
        "overhead_held": over.held_share,
        "overhead_calls": len(over.total_s),
    }
    return pd.concat(tables, ignore_index=True), info


def fmt(table: pd.DataFrame) -> str:
    """The comparison as a markdown table (values, intervals, difference)."""

    def v(x: float, unit: str) -> str:
        return f"{100 * x:.1f}%" if unit == "fraction" else f"{x:.3f}"

    lines = [
        "| client | load | tailsim | metric | real [95% CI] | tailsim [95% CI] "
        "| difference [95% CI] |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table.itertuples():
        d, lo, hi = 100 * r.diff, 100 * r.diff_lo, 100 * r.diff_hi
        suffix = " pts" if r.diff_kind == "points" else "%"
        diff = "n/a (0 real)" if np.isnan(d) else f"{d:+.1f}{suffix} [{lo:+.1f}, {hi:+.1f}]"
        lines.append(
            f"| {r.client} | {r.load} | {r.tailsim} | {r.metric} "
            f"| {v(r.real, r.unit)} [{v(r.real_lo, r.unit)}, {v(r.real_hi, r.unit)}] "
            f"| {v(r.sim, r.unit)} [{v(r.sim_lo, r.unit)}, {v(r.sim_hi, r.unit)}] "
            f"| {diff} |"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(description="real openai/LiteLLM client vs tailsim")
    ap.add_argument("--duration-s", type=float, default=90.0, help="arrivals per run, s")
    ap.add_argument("--loads", default="light,near-slots,quota", help="comma list of loads")
    ap.add_argument("--clients", default="openai,litellm", help="openai, litellm (quota only)")
    ap.add_argument("--reps", type=int, default=20, help="tailsim seeds per real run")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--seed", type=int, default=1, help="arrivals, service and bootstrap seed")
    ap.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip tailsim without SDK preset and overhead beside the openai runs",
    )
    ap.add_argument("--out", default=None, help="folder (default results/real_client/<time>)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run every (client, load), print and save the table."""
    args = parse(argv)
    clients = args.clients.split(",")
    wanted = set(args.loads.split(","))
    names = {load.name for load in LOADS}
    if not set(clients) <= {"openai", "litellm"} or not wanted <= names:
        print(f"error: --clients from openai, litellm; --loads from {', '.join(sorted(names))}")
        return 2
    needed = ["openai", "aiohttp"] + (["litellm"] if "litellm" in clients else [])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: not installed: {', '.join(missing)}; run pip install -e '.[real]'")
        return 2
    out = Path(args.out or f"results/real_client/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    setup = scen.Setup()
    tables, infos = [], []
    for client in clients:
        for load in LOADS:
            if load.name not in wanted or (client == "litellm" and load.tpm is None):
                continue
            print(f"{client} at {load.name} load ({load.rate_per_s} requests/s)...", flush=True)
            table, info = one_run(client, load, setup, args, out / f"{client}-{load.name}")
            tables.append(table)
            infos.append(info)
    if not tables:
        print("error: nothing to run (LiteLLM runs only at the quota load)")
        return 2
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "comparison.csv", index=False)
    pd.DataFrame(infos).to_csv(out / "overhead.csv", index=False)
    text = fmt(table)
    over = pd.DataFrame(infos).to_string(index=False, float_format="{:.3f}".format)
    (out / "comparison.md").write_text(
        f"{text}\n\nMeasured overhead per call:\n\n```\n{over}\n```\n"
    )
    print(text)
    print("\nmeasured overhead per call (client call time minus server queue and service):")
    print(over)
    print(f"results: {out}/ (comparison.csv, comparison.md, overhead.csv, one folder per run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
