"""Hold tailsim's streams to the real openai SDK: the fake server streams its answers (SSE) with
stalls placed before the first chunk or mid-stream and mid-stream breaks, the openai SDK reads
them with `stream=True` and a read timeout, and tailsim replays each run's own arrivals on the
scenario `scenario_dict` builds (written as `streaming_scenario.yaml` beside this file, with
Poisson arrivals in place of a run's trace). Calls per request and hit rate are compared at two
loads with 95% block-bootstrap intervals, as `experiments.real_client.run` does.

    python -m experiments.real_client.stream_run      # about 4 minutes; results/real_client_stream/

The simulator side reads the streams keys (`stall.where`, `mid_stream_error_rate`, a step's
`stream: true`: the SDK's `timeout_s` as a streamed call's read timeout); a tailsim that
refuses one stops after the real runs, naming it (exit 2). Figures: docs/fidelity.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from experiments.real_client import compare, driver
from experiments.real_client import scenario as scen
from experiments.real_client.run import Load, Server, fmt, simulate
from sim.model.errors import ScenarioError

HERE = Path(__file__).parent
SCENARIO_FILE = HERE / "streaming_scenario.yaml"


@dataclass(frozen=True)
class StreamSetup:
    """What the fake server, the driver and the scenario share (the stream law included)."""

    base: scen.Setup = field(default_factory=lambda: scen.Setup(deadline_s=6.0))
    tokens_per_s: float = 200.0
    chunk_tokens: int = 5
    stall_probability: float = 0.05
    stall_median_s: float = 3.0
    stall_p99_s: float = 10.0
    before_first_token: float = 0.5  # the share of stalls before the first chunk
    mid_stream_error_rate: float = 0.02
    read_timeout_s: float = 1.5  # openai's `timeout`: httpx's read timeout between chunks
    stream_retries: int = 1  # the driver's own retries of a failed streamed call

    def server_args(self) -> tuple[str, ...]:
        """The fake server's options for this stream law."""
        return (
            "--tokens-per-s", str(self.tokens_per_s), "--chunk-tokens", str(self.chunk_tokens),
            "--stall-p", str(self.stall_probability),
            "--stall-median-s", str(self.stall_median_s), "--stall-p99-s", str(self.stall_p99_s),
            "--stall-where", str(self.before_first_token),
            "--mid-stream-error-rate", str(self.mid_stream_error_rate),
        )  # fmt: skip

    def where(self) -> str | dict[str, float]:
        """`stall.where` as the streams schema spells it."""
        if self.before_first_token == 0:
            return "mid_stream"
        if self.before_first_token == 1:
            return "before_first_token"
        return {"before_first_token": self.before_first_token}


#: Light (slots ~25% busy) and near the slot limit: a streamed call holds its slot for its
#: first token (mean 0.336 s), its 50 tokens at 200/s (0.25 s) and its stalls (5% x ~3.6 s).
LOADS = (Load("light", 2.0), Load("near-slots", 5.0))


def scenario_dict(
    setup: StreamSetup, name: str, arrivals: dict[str, Any], overhead_file: str | None = None
) -> dict[str, Any]:
    """The tailsim scenario of the streaming driver: first token as the server's service law,
    generation at its speed, its stall (placed) and breaks, `sdk: openai` with the read timeout
    as `timeout_s` on steps that `stream: true` (an idle timeout), `wait` with the driver's
    retries."""
    b = setup.base
    serving = {
        "ttft_s": {"median": b.median_s, "p99": b.p99_s},
        "tokens_per_s": {"dist": "constant", "value": setup.tokens_per_s},
        "stall": {
            "probability": setup.stall_probability,
            "extra_s": {"median": setup.stall_median_s, "p99": setup.stall_p99_s},
            "where": setup.where(),
        },
        "mid_stream_error_rate": setup.mid_stream_error_rate,
    }
    provider: dict[str, Any] = {
        "concurrency": b.slots,
        "serves": {scen.MODEL: serving},
        "sdk": {"preset": "openai", "timeout_s": setup.read_timeout_s},
    }
    if overhead_file is not None:
        provider["overhead_s"] = {
            "dist": "empirical",
            "file": overhead_file,
            "column": "overhead_s",
        }
    workflow = b.workflow()
    for step in workflow["steps"]:
        step["stream"] = True
    return {
        "name": name,
        "seed": 1,
        "deadline_s": b.deadline_s,
        "arrivals": arrivals,
        "models": {scen.MODEL: {"price_per_mtok": {"input": 1.0, "output": 1.0}}},
        "providers": {"p": provider},
        "workflow": workflow,
        "policies": {"openai-stream": {"kind": "wait", "retries": setup.stream_retries}},
    }


def reference_text(setup: StreamSetup | None = None) -> str:
    """`streaming_scenario.yaml`'s text: the scenario at Poisson arrivals of the light load."""
    data = scenario_dict(
        setup or StreamSetup(), "real-openai-stream", {"kind": "poisson", "rate_per_s": 2.0}
    )
    head = "# Written by experiments/real_client/stream_run.py (reference_text); a run replays\n"
    head += "# its own arrivals (a trace) and measured overhead on the same keys.\n"
    return head + yaml.safe_dump(data, sort_keys=False)


def one_run(load: Load, setup: StreamSetup, args: argparse.Namespace, folder: Path) -> Any:
    """One real streaming run and, where tailsim takes the streams keys, its replay."""
    folder.mkdir(parents=True, exist_ok=True)
    b = setup.base
    n = max(20, round(load.rate_per_s * args.duration_s))
    work = driver.Workload(
        load.rate_per_s, n, b.steps, b.deadline_s, b.input_tokens, b.max_tokens, seed=args.seed
    )
    seed = 10 * args.seed + [x.name for x in LOADS].index(load.name)
    server = Server(b, folder / "server.jsonl", None, 1, seed, setup.server_args())
    try:
        requests, calls = asyncio.run(
            driver.run_openai_stream(work, server.url(), setup.read_timeout_s, setup.stream_retries)
        )
    finally:
        log = server.stop()
    pd.DataFrame(requests).to_csv(folder / "client_requests.csv", index=False)
    pd.DataFrame(calls).to_csv(folder / "client_calls.csv", index=False)
    real = compare.real_requests(requests, log, b.deadline_s)
    over = compare.measure_overhead(calls, log)
    trace = scen.write_trace(folder, real["arrival_s"].to_numpy())
    ofile = scen.write_overhead(folder, over.total_s)
    arrivals = {"kind": "trace", "file": trace, "column": "t"}
    data = scenario_dict(setup, f"real-openai-stream-{load.name}", arrivals, ofile)
    path = scen.save(folder, data)
    calls_per, hit = float(real["calls"].mean()), float(real["ok"].mean())
    print(f"  real: {len(real)} requests, {calls_per:.3f} calls/request, hit rate {hit:.1%}")
    sims = simulate(path, "openai-stream", len(real), args.reps)
    table = compare.bootstrap(real, sims, n_boot=args.boot, seed=args.seed)
    table = table[table["metric"].isin(["calls/req", "hit rate"])]
    table.insert(0, "tailsim", "streams")
    table.insert(0, "load", load.name)
    table.insert(0, "client", "openai stream=True")
    return table


def main(argv: list[str] | None = None) -> int:
    """Run both loads, print and save the table."""
    ap = argparse.ArgumentParser(description="real openai SDK (stream=True) vs tailsim")
    ap.add_argument("--duration-s", type=float, default=60.0, help="arrivals per run, s")
    ap.add_argument("--reps", type=int, default=20, help="tailsim seeds per real run")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--seed", type=int, default=1, help="arrivals, service and bootstrap seed")
    ap.add_argument(
        "--out", default=None, help="folder (default results/real_client_stream/<time>)"
    )
    args = ap.parse_args(argv)
    missing = [m for m in ("openai", "aiohttp") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: not installed: {', '.join(missing)}; run pip install -e '.[real]'")
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out or f"results/real_client_stream/{stamp}")
    setup = StreamSetup()
    tables, refused = [], None
    for load in LOADS:
        print(f"openai stream=True at {load.name} load ({load.rate_per_s} requests/s)...")
        try:
            tables.append(one_run(load, setup, args, out / load.name))
        except ScenarioError as error:
            refused = error
    if refused is not None:
        print(f"error: tailsim cannot run the streaming scenario yet: {refused}")
        print(f"(the real runs' logs are in {out}/)")
        return 2
    table = pd.concat(tables, ignore_index=True)
    table.to_csv(out / "comparison.csv", index=False)
    text = fmt(table)
    (out / "comparison.md").write_text(text + "\n")
    print(text)
    print(f"results: {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
