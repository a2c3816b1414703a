"""Experiment: the article's Figure 3, per-model latency distributions and their tails.

The article (1M+ production calls): every model's typical call takes 8-20 s, but the p99 runs
from ~30 s to past 80 s; the quickest typical model has a long tail; one model on two serving
paths has two different tails. We cannot have that data; we have a public log of 5,985 real
timed calls (thefastest.ai, MIT, bundled in experiments/data/thefastest-ai/) of short answers
(~20 output tokens), so seconds are smaller but the shape compares: per model and serving path,
the p99 / p50 ratio, how far the quickest body's tail reaches, and one model on two paths. Beside
it, the simulator's own `big` model on the default scenario's two providers (single calls).

Run: `python experiments/figure3.py` (about 20 s); writes results/experiments/figure3/.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from _common import DATA, DIRECT_BIG, beside, chain, out_dir, save, theme

import sim

MANAGED_BIG = {
    "ttft_s": {"median": 1.0, "p99": 6.0},
    "tokens_per_s": {"median": 55, "p99": 100},
    "stall": {"probability": 0.04, "extra_s": {"median": 35, "p99": 90}},
}


def real_paths() -> pd.DataFrame:
    """Per (model, provider) in the real log: calls, p50, p90, p99 and p99/p50 of latency_s."""
    log = pd.read_csv(DATA / "thefastest-ai" / "thefastest_ai_requests.csv")
    log = log[(log["status"] == "ok") & log["model"].notna()]
    log["path"] = log["model"] + " via " + log["provider"]
    table = log.groupby("path")["latency_s"].describe(percentiles=[0.5, 0.9, 0.99])
    table = table[table["count"] >= 60].rename(columns={"50%": "p50", "90%": "p90", "99%": "p99"})
    table["tail_ratio"] = table["p99"] / table["p50"]
    return table[["count", "p50", "p90", "p99", "tail_ratio"]].sort_values("p50"), log


def simulated_paths(requests: int = 4000) -> pd.DataFrame:
    """Single-call latency of the simulator's `big` model on the two default providers."""
    rows = {}
    for name, serving in (
        ("big via direct (sim)", DIRECT_BIG),
        ("big via managed (sim)", MANAGED_BIG),
    ):
        calls = sim.run(
            chain(name.split()[2], 1, serving, {"wait": {"kind": "wait"}}), requests=requests
        ).calls
        seconds = (calls["end_s"] - calls["start_s"])[calls["outcome"] == "ok"]
        p50, p90, p99 = np.percentile(seconds, [50, 90, 99])
        rows[name] = {
            "count": len(seconds),
            "p50": p50,
            "p90": p90,
            "p99": p99,
            "tail_ratio": p99 / p50,
        }
    return pd.DataFrame(rows).T


def main() -> None:
    folder = out_dir("figure3")
    real, log = real_paths()
    simulated = simulated_paths()
    both = pd.concat([real, simulated])
    both.to_csv(folder / "paths.csv")
    print(both.to_string(float_format=lambda v: f"{v:.2f}"))
    quickest = real.iloc[0]
    same_model = real[real.index.str.startswith("gpt-4-1106-preview via")]
    print()
    print(
        beside(
            [
                (
                    "typical call (p50) across models",
                    "8-20 s (long answers)",
                    f"{real['p50'].min():.2f}-{real['p50'].max():.2f} s (short answers); sim big "
                    f"{simulated['p50'].min():.1f}-{simulated['p50'].max():.1f} s",
                ),
                (
                    "p99 across models",
                    "~30 s to past 80 s",
                    f"{real['p99'].min():.2f}-{real['p99'].max():.2f} s; sim "
                    f"{simulated['p99'].min():.0f}-{simulated['p99'].max():.0f} s",
                ),
                (
                    "p99 / p50 per path",
                    "about 2-7x",
                    f"{real['tail_ratio'].min():.1f}-{real['tail_ratio'].max():.1f}x (median "
                    f"{real['tail_ratio'].median():.1f}x); sim {simulated['tail_ratio'].min():.1f}-"
                    f"{simulated['tail_ratio'].max():.1f}x",
                ),
                (
                    "quickest typical path still has a tail",
                    "Model C",
                    f"{real.index[0]}: p50 {quickest['p50']:.2f} s, p99 {quickest['p99']:.2f} s "
                    f"({quickest['tail_ratio']:.1f}x)",
                ),
                (
                    "one model, two serving paths",
                    "Model F: two tails",
                    "; ".join(
                        f"{i.split(' via ')[1]} p99 {r['p99']:.1f} s"
                        for i, r in same_model.iterrows()
                    ),
                ),
            ],
            "Figure 3: the article beside tailsim",
        )
    )
    theme()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), layout="constrained")
    shown = list(real.index[:: max(1, len(real) // 8)][:8]) + list(same_model.index)
    for path in dict.fromkeys(shown):
        values = np.sort(log.loc[log["path"] == path, "latency_s"])
        left.step(values, 1 - np.arange(len(values)) / len(values), where="post", label=path)
    left.set(
        xscale="log",
        yscale="log",
        xlabel="latency of a call (s, log)",
        ylabel="P(latency > t)",
        title="Real calls (thefastest.ai): survival per model and path",
    )
    left.legend(fontsize=7)
    for name, serving in (("direct", DIRECT_BIG), ("managed", MANAGED_BIG)):
        calls = sim.run(chain(name, 1, serving, {"wait": {"kind": "wait"}}), requests=4000).calls
        values = np.sort((calls["end_s"] - calls["start_s"])[calls["outcome"] == "ok"])
        right.hist(values, bins=np.arange(0, 91, 1), alpha=0.55, label=f"big via {name}")
    right.set(
        xlabel="latency of a call (s), 1 s bins, capped at 90",
        ylabel="calls",
        title="Simulated: one model, two serving paths (as the article's Fig. 3)",
        yscale="log",
    )
    right.legend()
    save(fig, folder / "figure3.png")


if __name__ == "__main__":
    main()
