"""Experiment: shedding and hedging that react to 429 pressure, on a saturated shared quota
(scenarios/tpm-saturation.yaml).

A blind race into a tight TPM quota draws ~1.8 429s per request; those 429s fail fast, so a
shed that forecasts from recent step times (`controls.shed`) never fires. This runs the
scenario's `race` beside the same race with: the step-time shed (`shed: {}`), the 429-aware shed
(`shed: {on_429_share: 0.3, window_s: 10}`), and hedging stopped per provider by its recent
429 share (`stop_hedging_on_429_share: {share: 0.1, window_s: 10}`), on --seeds seeds
(common random numbers within a seed). Prints per policy the mean over seeds and its standard
error (sd / sqrt(seeds)) of: hit rate, hit rate of the admitted (not shed) requests, share shed,
429s per request and goodput; and each policy's paired difference from `race` with its
standard error. Writes DIR/pressure.csv (one row per policy and seed).

Run: `python experiments/pressure.py [--seeds 10] [--out DIR]` (about 30 s on 2 shared cores;
default DIR: results/experiments/pressure/).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

import sim
from sim.model.scenario import scenario_from_dict

REPO = Path(__file__).resolve().parents[1]
RACE = {"kind": "race", "attempts": 2, "retries": 2}
POLICIES = {
    "race": RACE,
    "race_shed": {**RACE, "controls": {"shed": {}}},
    "race_shed429": {**RACE, "controls": {"shed": {"on_429_share": 0.3, "window_s": 10}}},
    "race_quiet429": {
        **RACE,
        "controls": {"stop_hedging_on_429_share": {"share": 0.1, "window_s": 10}},
    },
}
METRICS = (
    "hit_rate",
    "admitted_hit_rate",
    "shed_share",
    "rate_limited_per_request",
    "goodput_per_s",
)


def measure(seeds: int) -> pd.DataFrame:
    """One row per (policy, seed) with the metrics above."""
    base = sim.load_scenario(REPO / "scenarios" / "tpm-saturation.yaml")
    data = base.model_dump(exclude_none=True)
    data["policies"] = POLICIES
    scenario = scenario_from_dict(data)
    rows = []
    for seed in range(base.seed, base.seed + seeds):
        result = sim.run(scenario, seed=seed)
        requests = result.requests
        for row in result.summary.itertuples():
            mine = requests[requests["policy"] == row.policy]
            admitted = mine[mine["fail_reason"] != "shed"]
            rows.append(
                {
                    "policy": row.policy,
                    "seed": seed,
                    "hit_rate": row.hit_rate,
                    "admitted_hit_rate": float(admitted["ok"].mean()),
                    "shed_share": row.shed_requests / len(mine),
                    "rate_limited_per_request": row.rate_limited_per_request,
                    "goodput_per_s": row.goodput_per_s,
                }
            )
    return pd.DataFrame(rows)


def report(table: pd.DataFrame) -> str:
    """Mean +- SE over seeds per policy, then the paired difference from `race`."""
    n = table["seed"].nunique()
    lines = [f"tpm-saturation, {n} seeds: mean +- standard error over seeds"]
    lines.append(f"{'policy':14}" + "".join(f"{m:>26}" for m in METRICS))
    wide = table.set_index(["policy", "seed"])
    for policy in POLICIES:
        cells = wide.loc[policy]
        lines.append(f"{policy:14}" + "".join(f"{_mean_se(cells[m], n):>26}" for m in METRICS))
    lines.append("paired difference from race (same seeds, same draws)")
    for policy in list(POLICIES)[1:]:
        diff = wide.loc[policy] - wide.loc["race"]
        lines.append(f"{policy:14}" + "".join(f"{_mean_se(diff[m], n):>26}" for m in METRICS))
    return "\n".join(lines)


def _mean_se(values: pd.Series, n: int) -> str:
    se = float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    return f"{values.mean():+.4f} +- {se:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("results/experiments/pressure"))
    args = parser.parse_args()
    table = measure(args.seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "pressure.csv", index=False)
    print(report(table))
    print(f"\ntable: {args.out / 'pressure.csv'}")


if __name__ == "__main__":
    main()
