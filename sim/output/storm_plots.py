"""Storm figures, drawn from result tables: offered load, goodput and 429s over time per policy
(from timeseries.parquet), and `tailsim stress`'s burst size against recovery time."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only, no screen needed

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

#: (column, label, colour, line style) of the storm figure's lines, per second.
_LINES = (
    ("offered", "offered (new requests)", "0.35", "-"),
    ("demand", "offered + customer re-sends", "0.35", ":"),
    ("started", "calls sent", "#7570b3", "-"),
    ("succeeded", "goodput (runs delivered)", "#1b9e77", "-"),
    ("rate_limited", "429s", "#c0392b", "-"),
)
BURST_COLOUR = "#f4d03f"


def storm_figure(series: pd.DataFrame, title: str = "") -> Figure:
    """One panel per policy (same axes): offered requests, re-sends, calls, goodput and 429s per
    second over time; scheduled bursts shaded (and in the legend only where there are some).
    The shared y axis reaches the highest line of any panel, so no panel's peak is cut off."""
    policies = [str(p) for p in pd.unique(series["policy"])]
    fig, axes = plt.subplots(
        len(policies),
        1,
        figsize=(11, 1.0 + 2.1 * len(policies)),
        sharex=True,
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    t_all = np.unique(series["t_s"].to_numpy(float))
    width = float(t_all[1] - t_all[0]) if len(t_all) > 1 else 1.0
    peak, shaded = 0.0, False
    for ax, policy in zip(axes[:, 0], policies, strict=True):
        part = series[series["policy"].astype(str) == policy].sort_values("t_s")
        t = part["t_s"].to_numpy(float) + width / 2
        columns = {c: part[c].to_numpy(float) / width for c, *_ in _LINES if c in part}
        columns["demand"] = (part["offered"] + part["resent"]).to_numpy(float) / width
        for start, end in _runs(part["t_s"].to_numpy(float), part["burst"].to_numpy(bool), width):
            ax.axvspan(start, end, color=BURST_COLOUR, alpha=0.35, linewidth=0)
            shaded = True
        for column, _label, colour, style in _LINES:
            ax.plot(t, columns[column], color=colour, linestyle=style, linewidth=1.5)
            finite = columns[column][np.isfinite(columns[column])]
            peak = max(peak, float(finite.max()) if len(finite) else 0.0)
        ax.set_title(policy, loc="left", fontsize=11, fontweight="bold")
        ax.set_ylabel("per second")
        ax.grid(alpha=0.3)
    # once, after every panel: set per panel, the first panel's top froze the shared axis and
    # cut the taller peaks of the panels below it
    axes[0, 0].set_ylim(0, 1.05 * peak if peak > 0 else 1.0)
    axes[-1, 0].set_xlabel(f"simulated time (s), bins of {width:g} s")
    handles = [Line2D([], [], color=c, linestyle=s, label=label) for _, label, c, s in _LINES]
    if shaded:  # a burst entry that shades nothing (bursty or trace arrivals) would mislead
        handles.append(Patch(color=BURST_COLOUR, alpha=0.35, label="scheduled burst"))
    fig.legend(handles=handles, loc="outside lower center", ncols=6, frameon=False, fontsize=9)
    fig.suptitle(title or "Storm: offered load, goodput and 429s over time")
    return fig


def _runs(t: np.ndarray, flags: np.ndarray, width: float) -> list[tuple[float, float]]:
    """Contiguous stretches of flagged bins as (start, end) seconds."""
    out: list[tuple[float, float]] = []
    for start, flag in zip(t, flags, strict=True):
        if not flag:
            continue
        if out and math.isclose(out[-1][1], start):
            out[-1] = (out[-1][0], start + width)
        else:
            out.append((start, start + width))
    return out


#: Width (inches) one legend column of the stress figure needs at font size 9.
LEGEND_COLUMN_IN = 3.6
#: Multipliers the stress figure may label: the coarse grid, or the fine one where the coarse
#: would label fewer than three in view (a search that tried one or two multipliers).
COARSE_TICKS = (1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
FINE_TICKS = (1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64)
#: The narrowest span (max / min) of the multiplier axis, so one multiplier tried still reads.
MIN_SPAN = 2.25


def stress_figure(table: pd.DataFrame, window_s: float, title: str = "") -> Figure:
    """One panel per burst length: recovery time after the burst against the burst's rate
    multiplier, one line per policy in its colour of every other figure (`policy_colors`); a
    burst not recovered from within the window is an x on the 'not recovered' line. A policy
    whose line would hide under an earlier one's is drawn dashed, hollow-marked, on top. The
    legend, inside the figure, ranks policies by storm margin (as `sim.study.stress.margins`)."""
    from sim.output.colors import policy_colors  # noqa: PLC0415 - seaborn import, only when drawing
    from sim.output.overlap import curve_twins, legend_handle  # noqa: PLC0415
    from sim.study.stress import (  # noqa: PLC0415 - sim.study.stress imports the runner
        lower_bounds,
        margin_text,
        margins,
    )

    durations = sorted(table["duration_s"].unique())
    width = max(8.0, 5.5 * len(durations))
    fig, axes = plt.subplots(
        1, len(durations), figsize=(width, 4.8), sharey=True, layout="constrained", squeeze=False
    )
    ceiling = window_s * 1.15
    policies = [str(p) for p in pd.unique(table["policy"])]
    colours = policy_colors(policies)
    offsets = {p: (i - (len(policies) - 1) / 2) * 0.012 for i, p in enumerate(policies)}
    curves = {
        (p, d): _curve(table, p, d, ceiling) for p in policies for d in durations
    }  # fmt: skip
    twins = curve_twins(curves, policies, durations, 0.02 * window_s)
    for ax, duration in zip(axes[0], durations, strict=True):
        for policy in policies:
            m, y = curves[policy, duration]
            if not len(m):
                continue
            x = m * (1 + offsets[policy])  # overlap apart
            ok = y < ceiling
            twin = policy in twins
            colour = colours[policy]
            line = {"linestyle": "--", "zorder": 4} if twin else {"linestyle": "-", "zorder": 2}
            ax.plot(x, y, color=colour, linewidth=2.0 if twin else 1.6, alpha=0.9, **line)
            face = "white" if twin else colour
            top = line["zorder"] + 1
            ax.scatter(x[ok], y[ok], s=34, facecolors=face, edgecolors=colour, zorder=top)
            ax.scatter(x[~ok], y[~ok], color=colour, marker="x", s=60, linewidths=2, zorder=top)
        ax.axhline(window_s, color="black", linewidth=1, linestyle="--")
        ax.axhline(ceiling, color="#c0392b", linewidth=0.8)
        ax.text(1.0, window_s, "recovery window ", ha="right", va="bottom", fontsize=9,
                transform=ax.get_yaxis_transform())  # fmt: skip
        ax.text(1.0, ceiling, "not recovered (x) ", ha="right", va="bottom", fontsize=9,
                color="#c0392b", transform=ax.get_yaxis_transform())  # fmt: skip
        ax.set_xscale("log")
        lo, hi = _multiplier_view(table["multiplier"].to_numpy(float))
        ax.set_xlim(lo, hi)
        ax.set_xticks(_multiplier_ticks(lo, hi))
        ax.xaxis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _p: f"{v:g}x"))
        ax.xaxis.set_minor_locator(mpl.ticker.NullLocator())
        ax.set(xlabel="burst: arrival rate x multiplier", title=f"bursts of {duration:g} s")
        ax.set_ylim(0, ceiling * 1.1)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("seconds after the burst until goodput is back")
    best = margins(table)
    margin = best.groupby("policy")["margin_requests"].max()
    open_ended = lower_bounds(best)  # no burst tried beat them: the margin is '>= N'
    ranked = sorted(policies, key=lambda p: -float(margin.get(p, 0.0)))
    handles = [
        legend_handle(p, colours[p], p in twins,
                      f"{p} (margin {margin_text(float(margin.get(p, 0.0)), p not in open_ended)}"
                      " extra requests)")
        for p in ranked
    ]  # fmt: skip
    columns = max(1, min(len(handles), int(width // LEGEND_COLUMN_IN)))
    fig.legend(handles=handles, loc="outside lower center", ncols=columns, frameon=False,
               fontsize=9)  # fmt: skip
    fig.suptitle(title or "Storm margin: how big a burst each policy recovers from")
    return fig


def _multiplier_view(tried: np.ndarray) -> tuple[float, float]:
    """The multiplier axis: the bursts tried with room either side, at least `MIN_SPAN` wide
    (centred on them, on the log scale) so a single multiplier is not one lone tick."""
    lo, hi = float(np.min(tried)) / 1.15, float(np.max(tried)) * 1.15
    if hi / lo < MIN_SPAN:
        centre, half = math.sqrt(lo * hi), math.sqrt(MIN_SPAN)
        lo, hi = centre / half, centre * half
    return lo, hi


def _multiplier_ticks(lo: float, hi: float) -> list[float]:
    """The multipliers labelled in [lo, hi]: the coarse grid, or the fine one where the coarse
    labels fewer than three."""
    coarse = [t for t in COARSE_TICKS if lo <= t <= hi]
    return coarse if len(coarse) >= 3 else [t for t in FINE_TICKS if lo <= t <= hi]


def _curve(
    table: pd.DataFrame, policy: str, duration: float, ceiling: float
) -> tuple[np.ndarray, np.ndarray]:
    """(multipliers, recovery seconds) of one policy and burst length, sorted; a burst not
    recovered from sits at `ceiling`."""
    part = table[(table["policy"] == policy) & (table["duration_s"] == duration)]
    part = part.sort_values("multiplier")
    y = part["recovery_s"].to_numpy(float)
    return part["multiplier"].to_numpy(float), np.where(np.isfinite(y), y, ceiling)


def save(fig: Figure, path: Path) -> Path:
    """Save `fig` as a PNG at `path` and free it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
