"""Figures drawn from result tables (never from live engine objects), with seaborn."""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only, no screen needed

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure


def policy_comparison(
    summary: pd.DataFrame, requests: pd.DataFrame, deadline_s: float, title: str = ""
) -> Figure:
    """Two panels: each policy's end-to-end latency distribution against the deadline, and the
    trade it makes: hit rate (95% CI) against cost per request."""
    sns.set_theme(style="whitegrid", context="notebook")
    order = list(summary["policy"])
    palette = dict(zip(order, sns.color_palette("colorblind", len(order)), strict=True))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")

    runs = requests.assign(policy=requests["policy"].astype(str))
    sns.ecdfplot(data=runs, x="latency_s", hue="policy", hue_order=order, palette=palette, ax=left)
    left.axvline(deadline_s, color="black", linestyle="--", linewidth=1)
    left.text(deadline_s, 0.02, " deadline", ha="left", va="bottom", fontsize=9)
    left.set(
        xlabel="end-to-end latency of a run (s), misses counted at the deadline",
        ylabel="fraction of runs",
        title="Latency: how much of the tail the deadline cuts",
    )

    for row in summary.itertuples():
        yerr = [[row.hit_rate - row.hit_rate_lo], [row.hit_rate_hi - row.hit_rate]]
        right.errorbar(
            row.cost_per_request_usd,
            row.hit_rate,
            yerr=yerr,
            fmt="o",
            capsize=4,
            color=palette[row.policy],
            markersize=8,
        )
        right.annotate(
            str(row.policy),
            (row.cost_per_request_usd, row.hit_rate),
            textcoords="offset points",
            xytext=(8, -4),
            fontsize=10,
        )
    right.set(
        xlabel="cost per request (USD, cancelled calls billed)",
        ylabel="deadline hit rate (95% Wilson CI)",
        title="The trade: reliability vs cost",
    )
    right.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    if title:
        fig.suptitle(title)
    return fig


def write_policy_comparison(
    summary: pd.DataFrame, requests: pd.DataFrame, deadline_s: float, path: Path, title: str = ""
) -> Path:
    """Draw `policy_comparison` and save it as a PNG at `path`."""
    return _save(policy_comparison(summary, requests, deadline_s, title), path)


def sweep_figure(summary: pd.DataFrame, keys: list[str], title: str = "") -> Figure:
    """Hit rate and cost per request of each policy against the first grid key (mean over
    replications, bars: min to max); a second grid key, if any, splits the lines by style."""
    sns.set_theme(style="whitegrid", context="notebook")
    x, style = keys[0], (keys[1] if len(keys) > 1 else None)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), layout="constrained")
    data = summary.assign(policy=summary["policy"].astype(str))
    for ax, metric, label in (
        (left, "hit_rate", "deadline hit rate"),
        (right, "cost_per_request_usd", "cost per request (USD)"),
    ):
        sns.lineplot(
            data=data,
            x=x,
            y=metric,
            hue="policy",
            style=style,
            marker="o",
            errorbar=("pi", 100),
            ax=ax,
        )
        ax.set(xlabel=x, ylabel=label)
    left.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    if title:
        fig.suptitle(title)
    return fig


def write_sweep_figure(summary: pd.DataFrame, keys: list[str], path: Path, title: str = "") -> Path:
    """Draw `sweep_figure` and save it as a PNG at `path`."""
    return _save(sweep_figure(summary, keys, title), path)


def _save(fig: Figure, path: Path) -> Path:
    """Save `fig` as a PNG at `path` and free it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path
