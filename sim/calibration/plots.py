"""`tailsim fit`'s figure: observed vs fitted latency per group, and p50 -> p99 per size bucket.

Left: per group, the ECDF of observed successful-call latency (steps) against the fitted law's
(line), on log time. Right: the article's Figure 4 dumbbells (p50 circle -> p99 diamond per
output-size bucket, observed filled, fitted hollow).
"""

from __future__ import annotations

import math

import matplotlib as mpl

mpl.use("Agg")  # files only, no screen needed

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from sim.calibration.report import GroupFit
from sim.output.plots import plain_log

TAIL_RED = "#c0392b"
#: Groups drawn in the ECDF grid at most (the largest by calls).
MAX_PANELS = 16


def fit_figure(fits: list[GroupFit], buckets: pd.DataFrame) -> Figure:
    """The ECDF grid (largest groups first) beside the dumbbells of every group and bucket."""
    shown = sorted(fits, key=lambda g: -len(g.observed))[:MAX_PANELS]
    cols = min(4, max(1, len(shown)))
    rows = math.ceil(len(shown) / cols)
    fig = plt.figure(
        figsize=(4 * cols + 6, max(3.2 * rows, 0.3 * len(buckets) + 2)), layout="constrained"
    )
    grid = fig.add_gridspec(rows, cols + 2)
    blue, orange = sns.color_palette("colorblind", 2)
    for i, g in enumerate(shown):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        obs = np.sort(g.observed)
        ax.step(
            obs,
            np.arange(1, len(obs) + 1) / len(obs),
            where="post",
            color=blue,
            label=f"observed (n={len(obs):,})",
        )
        model = np.sort(g.modelled)
        ax.plot(model, np.arange(1, len(model) + 1) / len(model), color=orange, label="fitted")
        ax.set_xscale("log")
        plain_log(ax.xaxis)  # 0.5, 1, 2, 5: plain numbers, the 2x and 5x minor ticks labelled
        ax.set_title(f"{g.fit.provider}/{g.fit.model}\nKS {g.ks:.3f} ({g.fit.mode})", fontsize=8)
        ax.set_xlabel("latency (s, log)", fontsize=8)
        ax.set_ylabel("share of calls", fontsize=8)
        ax.tick_params(labelsize=7, which="both")
        if i == 0:
            ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[:, cols:])
    for y, row in enumerate(buckets.itertuples()):
        ax.plot([row.p50_obs_s, row.p99_obs_s], [y - 0.15] * 2, color="0.4", linewidth=2)
        ax.plot(row.p50_obs_s, y - 0.15, "o", color=blue)
        ax.plot(row.p99_obs_s, y - 0.15, "D", color=TAIL_RED)
        ax.plot([row.p50_fit_s, row.p99_fit_s], [y + 0.15] * 2, color="0.7", linewidth=2)
        ax.plot(row.p50_fit_s, y + 0.15, "o", mfc="none", color=blue)
        ax.plot(row.p99_fit_s, y + 0.15, "D", mfc="none", color=TAIL_RED)
        ax.text(
            max(row.p99_obs_s, row.p99_fit_s),
            y,
            f"  {row.ratio_obs:.1f}x / {row.ratio_fit:.1f}x",
            va="center",
            fontsize=7,
        )
    labels = [
        f"{r.provider}/{r.model} {r.output_tokens} tok (n={r.n})" for r in buckets.itertuples()
    ]
    ax.set_yticks(range(len(buckets)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.tick_params(axis="x", which="both", labelsize=8)
    if len(buckets):  # room right of the largest p99 for its ratio, inside the axes
        widest = float(np.nanmax(np.maximum(buckets["p99_obs_s"], buckets["p99_fit_s"])))
        ax.set_xlim(right=widest * 2.2)
    ax.set(
        xlabel="latency of a successful call (s, log)\np50 (circle) -> p99 (diamond); "
        "observed filled, fitted hollow",
        title="p99/p50 per output-size bucket (observed / fitted)",
    )
    return fig
