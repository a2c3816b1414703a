"""`tailsim nines` on disk and for people: nines.csv, the per-policy figure on a log axis, the
tilt, the notes (what ended the run), and the plain-language lines (nines with their interval,
which pairs differ, whether the numbers depend on the machine)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only, no screen needed

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from sim.model.words import plural
from sim.output.colors import policy_colors
from sim.output.results import staged
from sim.rare.nines import MIN_ESS, STOPPED_BY_BUDGET, STOPPED_BY_TARGET, NinesResult

NINES_FIGURE = "figures/nines.png"
#: How the run stopped and whether its numbers depend on the machine, with its warnings.
NOTES = "notes.txt"


def as_nines(p: float, lo: float, hi: float) -> str:
    """A miss probability as the hit rate with its interval: '99.987% [99.985, 99.989]'."""
    if math.isnan(p):
        return "n/a"
    digits = max(1, min(6, math.ceil(-math.log10(max(100 * (hi - lo), 1e-10)))))
    return f"{100 * (1 - p):.{digits}f}% [{100 * (1 - hi):.{digits}f}, {100 * (1 - lo):.{digits}f}]"


def comparison_lines(result: NinesResult) -> list[str]:
    """One line per pair of policies: whose miss probability is lower, and whether their 95%
    intervals (and the paired difference's) tell them apart."""
    lines = []
    for first, second, d, d_lo, d_hi, overlap in result.comparisons():
        a, b, diff, lo, hi = (
            (second, first, -d, -d_hi, -d_lo) if d > 0 else (first, second, d, d_lo, d_hi)
        )
        if not overlap:
            lines.append(
                f"{a} misses less than {b}: their 95% CIs do not overlap "
                f"(paired difference {diff:.3g} [{lo:.3g}, {hi:.3g}])"
            )
        elif hi < 0:
            lines.append(
                f"{a} misses less than {b} on the paired difference {diff:.3g} [{lo:.3g}, "
                f"{hi:.3g}] (their own CIs overlap)"
            )
        else:
            lines.append(f"{a} and {b} cannot be told apart (paired difference CI holds 0)")
    return lines


def composition_lines(result: NinesResult) -> list[str]:
    """What each policy's misses are made of: long stalls, outright failures, the top step."""
    lines = []
    for row in result.table.to_dict("records"):
        p = row["miss_probability"]
        if not p:
            continue
        parts = [
            f"{row['misses_with_long_stall']:.0%} hold a first-attempt stall longer than "
            f"{result.long_stall_s:g} s ({row['misses_with_2_long_stalls']:.0%} two or more)",
            f"{row['fail_probability'] / p:.0%} are outright failures",
        ]
        if row["top_stall_step"]:
            parts.append(f"most long stalls at {row['top_stall_step']}")
        lines.append(f"{row['policy']}: of its misses, " + "; ".join(parts))
    return lines


def stop_lines(result: NinesResult) -> list[str]:
    """What ended the run and whether its numbers depend on this machine: the precision target
    (they do not: the same scenario and seed give them anywhere), the wall-clock budget (they
    do: a faster machine runs more batches in it), the cap on runs; and each policy whose
    cross-entropy pilot the budget cut short (its tilt would differ on another machine)."""
    target = f"every policy's 95% CI within {100 * result.target_rel_error:g}% of its estimate"
    if result.method == "importance":
        target += f" with an effective sample size of at least {MIN_ESS:,}"
    runs = min((e.miss.n for e in result.estimates.values()), default=0)
    if result.stopped_by == STOPPED_BY_TARGET:
        line = f"stopped: at the target ({target}), after {runs:,} runs per policy"
    elif result.stopped_by == STOPPED_BY_BUDGET:
        line = (
            f"stopped: by the time budget (--budget-s {result.budget_s:g}), not the target "
            f"({target}), after {runs:,} runs per policy: how many runs fit in the budget, and "
            "so every number here, depends on this machine's speed and load; a larger "
            "--budget-s or a looser --target-rel-error gives numbers that do not"
        )
    else:
        line = f"stopped: at the cap of {runs:,} runs per policy, before the target ({target})"
    lines = [line]
    for name, e in result.estimates.items():
        if e.pilot_cut:
            lines.append(
                f"stopped: the cross-entropy pilot of '{name}' ran out of its share of the time "
                f"budget after {plural(e.levels, 'level')}, short of the miss: its tilt, and so "
                "every number here, depends on this machine's speed"
            )
    if result.machine_dependent and result.stopped_by != STOPPED_BY_BUDGET:
        lines[0] += " (but see below)"
    return lines


def nines_figure(result: NinesResult) -> Figure:
    """The miss probability per policy with its 95% interval, on a log axis."""
    table = result.table
    fig, ax = plt.subplots(figsize=(7, 1.6 + 0.5 * len(table)), layout="constrained")
    y = np.arange(len(table))[::-1]
    p = table["miss_probability"].to_numpy(float)
    lo, hi = table["ci_lo"].to_numpy(float), table["ci_hi"].to_numpy(float)
    positive = np.concatenate((lo[lo > 0], p[p > 0]))
    floor = float(positive.min()) / 3 if len(positive) else 1e-9
    shown = np.where(p > 0, p, floor)
    colors = policy_colors(table["policy"])  # the same colour as in every other figure
    below = np.maximum(shown - np.maximum(lo, floor), 0)
    above = np.maximum(hi - shown, 0)
    for i, policy in enumerate(table["policy"]):
        ax.errorbar(
            shown[i], y[i], xerr=[[below[i]], [above[i]]], fmt="o", capsize=4,
            color=colors[str(policy)],
        )  # fmt: skip
    for yi, pi in zip(y, p, strict=True):
        if not pi > 0:
            ax.annotate("no miss seen", (floor, yi), xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    low = math.floor(math.log10(max(floor, float(np.nanmin(np.maximum(lo, floor))))))
    high = math.ceil(math.log10(max(float(np.nanmax(hi)), 10.0 ** (low + 1))))
    ax.set_xlim(10.0**low, 10.0**high)
    for k in range(max(low, -7), min(high, -1) + 1):  # the nines: 99%, 99.9%, ... met
        ax.axvline(10.0**k, color="0.6", linewidth=0.8, linestyle=":")
        edge = k == high  # the right edge: the label goes left of its line, inside the axes
        ax.annotate(
            f"{100 * (1 - 10.0**k):.{max(0, -k - 2)}f}% met to the left", (10.0**k, 0.0),
            xycoords=("data", "axes fraction"), xytext=(-3 if edge else 3, 3),
            textcoords="offset points", fontsize=7, color="0.4", ha="right" if edge else "left",
        )  # fmt: skip
    ax.set_yticks(y, table["policy"])
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.set_xlabel("P(miss the deadline) per request, with 95% CI (log scale)")
    ax.set_title(
        f"{result.plan.name}: deadline {result.plan.deadline_s:g} s ({result.method})",
        loc="left",
    )
    ax.grid(alpha=0.3, which="both", axis="x")
    return fig


def write_nines(result: NinesResult, folder: Path, figures: bool = True) -> Path:
    """Write nines.csv, tilt.txt, notes.txt and figures/nines.png to `folder` atomically."""
    with staged(folder, overwrite=True) as staging:
        result.table.to_csv(staging / "nines.csv", index=False)
        lines = [f"{name}: {result.describe_tilt(name)}" for name in result.tilts]
        (staging / "tilt.txt").write_text("\n".join(lines or ["none"]) + "\n", encoding="utf-8")
        notes = stop_lines(result) + [f"warning: {warning}" for warning in result.warnings]
        (staging / NOTES).write_text("\n".join(notes) + "\n", encoding="utf-8")
        if figures:
            (staging / "figures").mkdir()
            fig = nines_figure(result)
            fig.savefig(staging / NINES_FIGURE, dpi=120)
            plt.close(fig)
    return folder
