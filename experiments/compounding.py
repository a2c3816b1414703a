"""Experiment: reliability and the clock both compound over a chain of steps.

The article's sidebar: n steps that each succeed with probability p give p**n end to end (0.95
-> ten steps ~60%, twenty ~36%), and "the exact same compounding happens on the clock". This
runs chains of n = 1..20 steps through the simulator twice:

1. correctness: each call fails (hard error) with probability 5%, no retries, no deadline to
   speak of; the simulated hit rate is printed beside the closed form 0.95**n;
2. the clock: no errors, each step a heavy-tailed call (median ~5.5 s, a 3% mid-stream stall of
   ~30 s), the deadline 6.5 s per step plus 20 s of slack: one stall sinks the run (the single
   big jump), so the hit rate falls with n like a compounding probability although every step is
   individually fast; cutting each call at its pilot p95 and retrying wins it back.

Run: `python experiments/compounding.py [--requests N] [--out DIR]`; prints a table and writes
DIR/compounding.png (default DIR: results/experiments/).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

import sim
from sim.analysis.analytic import chain_success, wilson_interval
from sim.model.scenario import scenario_from_dict

CHAIN_LENGTHS = (1, 2, 5, 10, 15, 20)
ERROR_RATE = 0.05
#: The clock: each step gets about its typical time, and the chain a fixed slack on top.
SECONDS_PER_STEP = 6.5
SLACK_S = 20.0


def chain(
    n: int, serving: dict[str, Any], deadline_s: float, policies: dict[str, Any]
) -> sim.Scenario:
    """A chain of n identical steps on one uncontended provider."""
    steps = [
        {"id": f"s{i}", "model": "m", "input_tokens": 2000, "output_tokens": 300}
        for i in range(1, n + 1)
    ]
    for i in range(1, n):
        steps[i]["after"] = [f"s{i}"]
    return scenario_from_dict(
        {
            "name": f"chain-{n}",
            "seed": 11,
            "deadline_s": deadline_s,
            "arrivals": {"kind": "poisson", "rate_per_s": 0.2},
            "models": {"m": {"price_per_mtok": {"input": 2.5, "output": 10.0}}},
            "providers": {"p": {"serves": {"m": serving}}},
            "workflow": {"steps": steps},
            "policies": policies,
            "pilot": {"requests": 500},
        },
        source=f"chain-{n}",
    )


def run_experiment(requests: int) -> pd.DataFrame:
    """Hit rates per chain length: errors vs p**n, and the clock under wait and cut."""
    rows = []
    fast = {"ttft_s": {"median": 0.5, "p99": 2.0}, "tokens_per_s": {"median": 60, "p99": 110}}
    for n in CHAIN_LENGTHS:
        faulty = chain(n, {**fast, "error_rate": ERROR_RATE}, 1e6, {"wait": {"kind": "wait"}})
        result = sim.run(faulty, requests=requests)
        ok = int(result.requests["ok"].sum())
        lo, hi = wilson_interval(ok, requests)
        rows.append(
            {
                "n": n,
                "setting": "errors 5%, no retries",
                "policy": "wait",
                "hit_rate": ok / requests,
                "lo": lo,
                "hi": hi,
                "theory": chain_success(1 - ERROR_RATE, n),
            }
        )
        slow = {**fast, "stall": {"probability": 0.03, "extra_s": {"median": 30, "p99": 80}}}
        policies = {"wait": {"kind": "wait"}, "cut": {"kind": "cut", "cutoff": "p95", "retries": 2}}
        clocked = chain(n, slow, SECONDS_PER_STEP * n + SLACK_S, policies)
        summary = sim.run(clocked, requests=requests).summary
        for row in summary.itertuples():
            rows.append(
                {
                    "n": n,
                    "setting": f"deadline {SECONDS_PER_STEP:g} s/step + {SLACK_S:g} s",
                    "policy": row.policy,
                    "hit_rate": row.hit_rate,
                    "lo": row.hit_rate_lo,
                    "hi": row.hit_rate_hi,
                    "theory": float("nan"),
                }
            )
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame, path: Path) -> None:
    """Hit rate against chain length, simulated (with 95% CI) and p**n."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 4.8), layout="constrained")
    for (setting, policy), part in table.groupby(["setting", "policy"], sort=False):
        ax.errorbar(
            part["n"],
            part["hit_rate"],
            yerr=[part["hit_rate"] - part["lo"], part["hi"] - part["hit_rate"]],
            marker="o",
            capsize=3,
            label=f"simulated: {setting}, {policy}",
        )
    theory = table.dropna(subset=["theory"])
    ax.plot(theory["n"], theory["theory"], "k--", label="closed form 0.95^n")
    ax.set(
        xlabel="steps in the chain",
        ylabel="end-to-end hit rate",
        title="Reliability compounds, and so does the clock",
    )
    ax.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    """Run, print, plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=Path("results/experiments"))
    args = parser.parse_args()
    table = run_experiment(args.requests)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    plot(table, args.out / "compounding.png")
    print(f"figure: {args.out / 'compounding.png'}")


if __name__ == "__main__":
    main()
