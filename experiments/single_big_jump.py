"""Experiment: the single big jump, P(sum > t) against P(max > t).

The article's sidebar: for independent subexponential steps, P(sum X_i > t) ~ n P(X > t) ~
P(max X_i > t) as t grows: a chain overruns because *one* step hit its tail. Ten sequential steps
of the default `big` serving (lognormal first token and speed, a 3% stall of ~30 s) run through
the simulator with no deadline; per run we take the end-to-end time S, the slowest step M and
the sum of the others. Printed: the tail of S beside n P(X > t - (n-1) E[X]) (the single big
jump with the other steps at their mean), and for the runs past S's p99 the share of the
overrun carried by the one slowest step.

Run: `python experiments/single_big_jump.py` (about 30 s); writes
results/experiments/single_big_jump/.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from _common import DIRECT_BIG, beside, chain, out_dir, save, theme

import sim

STEPS = 10


def step_table(requests: int) -> pd.DataFrame:
    """Per run: S (sum of step times), M (slowest step)."""
    scenario = chain("jump", STEPS, DIRECT_BIG, {"wait": {"kind": "wait"}}, rate_per_s=0.5)
    calls = sim.run(scenario, requests=requests).calls
    calls = calls.assign(seconds=calls["end_s"] - calls["start_s"])
    per_run = calls.groupby("request_id")["seconds"]
    return pd.DataFrame({"S": per_run.sum(), "M": per_run.max()}), calls["seconds"].to_numpy()


def main() -> None:
    folder = out_dir("single_big_jump")
    runs, steps = step_table(20000)
    mean = steps.mean()
    median_sum = runs["S"].median()
    ts = np.quantile(runs["S"], [0.9, 0.95, 0.99, 0.995, 0.999])
    rows = []
    for t in ts:
        p_sum = (runs["S"] > t).mean()
        p_max = (runs["M"] > t - (STEPS - 1) * mean).mean()
        single = min(1.0, STEPS * (steps > t - (STEPS - 1) * mean).mean())
        rows.append(
            {"t_s": t, "P(S>t)": p_sum, "P(M>t-(n-1)E[X])": p_max, "n P(X>t-(n-1)E[X])": single}
        )
    table = pd.DataFrame(rows)
    table.to_csv(folder / "tails.csv", index=False)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    tail = runs[runs["S"] > np.quantile(runs["S"], 0.99)]
    overrun = tail["S"] - median_sum
    share = ((tail["M"] - np.median(steps)) / overrun).clip(0, 1)
    print()
    print(
        beside(
            [
                (
                    "P(sum > t) vs the single big jump",
                    "~ equal as t grows",
                    f"at S's p99.9: {table['P(S>t)'].iloc[-1]:.4f} vs "
                    f"{table['n P(X>t-(n-1)E[X])'].iloc[-1]:.4f}",
                ),
                (
                    "overrun past p99 carried by one step",
                    "dominated by the slowest step",
                    f"median share {share.median():.0%} (mean {share.mean():.0%}) of "
                    f"{len(tail)} runs past p99",
                ),
            ],
            "Single big jump: the article beside tailsim",
        )
    )
    theme()
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    grid = np.linspace(np.quantile(runs["S"], 0.5), runs["S"].max(), 200)
    ax.plot(grid, [(runs["S"] > t).mean() for t in grid], label="P(sum of 10 steps > t)")
    ax.plot(
        grid,
        [(runs["M"] > t - (STEPS - 1) * mean).mean() for t in grid],
        "--",
        label="P(slowest step > t - 9 E[X])",
    )
    ax.plot(
        grid,
        [min(1, STEPS * (steps > t - (STEPS - 1) * mean).mean()) for t in grid],
        ":",
        label="10 P(X > t - 9 E[X]) (single big jump)",
    )
    ax.set(
        yscale="log",
        xlabel="t (s)",
        ylabel="probability",
        title="The total behaves like its maximum: ten heavy-tailed steps",
    )
    ax.legend()
    save(fig, folder / "single_big_jump.png")


if __name__ == "__main__":
    main()
