"""Rare-event estimates (`tailsim nines`) against plain Monte Carlo, and what they save.

Run: `python benchmarks/nines.py agree|event|speedup [--plain-runs N]`. Not part of the test
run; each part prints a markdown table (kept in docs/nines.md and docs/performance.md) and
writes it as CSV under results/benchmarks/nines/.

- `agree`: the bundled default scenario at deadline 120 s and 90 s (as shipped), every policy:
  the importance-sampling estimate (to +-5%, or 120 s) against `--plain-runs` (default
  2,000,000) plain runs, with z = difference / joint standard error.
- `event`: the same on scenarios/tpm-saturation.yaml (a shared TPM quota, the event engine),
  policies race_capped and cut: where shared state makes the weights an approximation, the
  bias measured.
- `speedup`: the closed-form chain (tests/data/nines-chain.yaml) at deadlines where the exact
  miss is 1e-3, 1e-4, 1e-5, on the vectorized and the event engine: runs and seconds the
  rare-event estimate needs for +-10% (pilot included), against plain Monte Carlo's
  1.96^2 (1-p) / (0.1^2 p) runs at its measured runs per second.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import pandas as pd
from scipy.optimize import brentq

from sim.analysis.chain_exact import chain_miss_probability
from sim.model.latency import LogNormal
from sim.model.scenario import load_scenario, with_overrides
from sim.plan import compile_scenario
from sim.rare.nines import estimate_nines
from sim.rare.weighted import plain_runs_needed

OUT = Path("results/benchmarks/nines")


def _row(label: str, policy: str, rare, plain) -> dict:  # type: ignore[no-untyped-def]
    a = rare.table.set_index("policy").loc[policy]
    b = plain.table.set_index("policy").loc[policy]
    se_a = (a["ci_hi"] - a["ci_lo"]) / (2 * 1.959964)
    se_b = (b["ci_hi"] - b["ci_lo"]) / (2 * 1.959964)
    joint = math.hypot(se_a, se_b)
    return {
        "case": label, "policy": policy, "engine": a["engine"],
        "rare_p": a["miss_probability"], "rare_lo": a["ci_lo"], "rare_hi": a["ci_hi"],
        "rare_runs": a["runs"], "plain_p": b["miss_probability"], "plain_lo": b["ci_lo"],
        "plain_hi": b["ci_hi"], "plain_runs": b["runs"],
        "z": (a["miss_probability"] - b["miss_probability"]) / joint if joint else math.nan,
        "rel_bias": a["miss_probability"] / b["miss_probability"] - 1,
        "rare_fail": a["fail_probability"], "plain_fail": b["fail_probability"],
    }  # fmt: skip


def _plain(scenario, policies, runs: int, seed: int, engine=None):  # type: ignore[no-untyped-def]
    return estimate_nines(
        compile_scenario(scenario),
        policies,
        1e-9,
        1e9,
        seed=seed,
        method="plain",
        max_runs=runs,
        engine=engine,
    )


def agree(plain_runs: int, deadlines: tuple[float, ...] = (120.0, 90.0)) -> pd.DataFrame:
    """Default scenario, every policy, at each deadline (each one's rows printed and saved as
    soon as it is done)."""
    rows = []
    base = load_scenario("scenarios/default.yaml")
    for deadline in deadlines:
        scenario = with_overrides(base, {"deadline_s": deadline})
        rare = estimate_nines(compile_scenario(scenario), None, 0.05, 120, seed=1)
        plain = _plain(scenario, None, plain_runs, seed=2)
        rows += [_row(f"default, deadline {deadline:g} s", p, rare, plain) for p in plain.estimates]
        OUT.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(OUT / "agree.partial.csv", index=False)
        print(pd.DataFrame(rows).to_string(index=False), flush=True)
    return pd.DataFrame(rows)


def event(plain_runs: int, policies: tuple[str, ...] = ("race_capped", "cut")) -> pd.DataFrame:
    """The shared-quota scenario on the event engine (each policy saved when done)."""
    scenario = load_scenario("scenarios/tpm-saturation.yaml")
    rows = []
    for policy in policies:
        rare = estimate_nines(compile_scenario(scenario), [policy], 0.05, 300, seed=1)
        plain = _plain(scenario, [policy], plain_runs, seed=2)
        rows.append(_row("tpm-saturation (shared TPM quota)", policy, rare, plain))
        OUT.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(OUT / f"event.{'-'.join(policies)}.partial.csv", index=False)
        print(pd.DataFrame(rows).to_string(index=False), flush=True)
    return pd.DataFrame(rows)


def speedup() -> pd.DataFrame:
    """Runs and seconds for +-10% at 1e-3, 1e-4, 1e-5 on the chain, per engine."""
    base = load_scenario("tests/data/nines-chain.yaml")
    laws = (LogNormal.from_median_p99(0.8, 4.0), LogNormal.from_median_p99(60, 110))
    stall = LogNormal.from_median_p99(8, 30)

    def exact(d: float) -> float:
        return chain_miss_probability(5, *laws, 300, 0.05, stall, d)

    rows = []
    for engine in ("vectorized", "des"):
        for target in (1e-3, 1e-4, 1e-5):
            deadline = brentq(lambda d, t=target: math.log(exact(d) / t), 40, 300, xtol=0.01)
            scenario = with_overrides(base, {"deadline_s": float(deadline)})
            began = time.perf_counter()
            rare = estimate_nines(
                compile_scenario(scenario), None, 0.1, 3600, seed=3, engine=engine
            )
            seconds = time.perf_counter() - began
            r = rare.table.iloc[0]
            rare_runs = int(r["runs"] + r["pilot_runs"])
            plain = _plain(scenario, None, 40_000 if engine == "vectorized" else 8_000, 4, engine)
            p = plain.table.iloc[0]
            rate = p["runs"] / p["seconds"]
            need = plain_runs_needed(exact(deadline))
            rows.append({
                "engine": engine, "exact_p": exact(deadline), "deadline_s": round(deadline, 2),
                "rare_p": r["miss_probability"], "rare_rel_error": r["rel_error"],
                "rare_runs": rare_runs, "rare_s": seconds, "plain_runs": need,
                "plain_s": need / rate, "plain_runs_per_s": rate,
                "speedup_runs": need / rare_runs, "speedup_s": need / rate / seconds,
            })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("agree", "event", "speedup"))
    parser.add_argument("--plain-runs", type=int, default=2_000_000)
    parser.add_argument("--policy", action="append", help="event: only these policies")
    args = parser.parse_args()
    began = time.perf_counter()
    chosen = tuple(args.policy or ("race_capped", "cut"))
    table = {"agree": lambda: agree(args.plain_runs), "speedup": speedup,
             "event": lambda: event(args.plain_runs, chosen)}[args.part]()  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    name = args.part if args.part != "event" or not args.policy else "event-" + "-".join(chosen)
    table.to_csv(OUT / f"{name}.csv", index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
