"""Figures drawn from result tables (never from live engine objects), with seaborn/matplotlib.

Every figure colours a policy the same way (`sim.output.colors.policy_colors`), titles itself
and labels its axes with units. `write_figures(folder)` draws every figure a results folder
supports: a run folder gets the comparison, the latency ECDF, the Pareto view, the p50->p99
dumbbells, the waited-vs-raced strip plot and (with timeseries.parquet) the storm; a sweep folder
gets the sweep figure and the Pareto view over all its points.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")  # files only, no screen needed

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import yaml
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sim.analysis.reading import pareto_frontier
from sim.model.words import plural
from sim.output.colors import policy_colors
from sim.output.labels import fit_legend, line_boxes, marker_boxes, place_labels
from sim.output.overlap import ecdf_twins, legend_handle, point_twins

#: Output-size buckets (tokens) of the dumbbell figure: fixed edges, as the article's rows.
SIZE_EDGES = (0, 50, 150, 300, 600, 1200, 2400, np.inf)
#: A bucket needs this many calls before its p99 is shown.
MIN_BUCKET_CALLS = 100
TAIL_RED = "#c0392b"


def _theme() -> None:
    sns.set_theme(style="whitegrid", context="notebook")


def _legend(
    fig: Figure,
    colors: dict[str, tuple[float, float, float]],
    extra: Sequence = (),
    twins: Iterable[str] = (),
) -> None:
    """One legend for the whole figure (never one per line or panel), in as many columns as fit
    its width; `twins` (drawn dashed or hollow over a look-alike, see sim.output.overlap) keep
    that look in the legend."""
    handles = [legend_handle(p, c, p in set(twins)) for p, c in colors.items()]
    fit_legend(fig, [*handles, *extra])


# ---------------------------------------------------------------------------- one run


def policy_comparison(
    summary: pd.DataFrame, requests: pd.DataFrame, deadline_s: float, title: str = ""
) -> Figure:
    """Two panels: each policy's end-to-end latency distribution against the deadline, and the
    trade it makes: hit rate (95% CI) against cost per success (filled), with cost per request
    beside it (hollow) so a policy that fails cheaply cannot look cheap."""
    _theme()
    order = [str(p) for p in summary["policy"]]
    colors = policy_colors(order)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    lines = _ecdf(left, requests, order, colors, deadline_s, log=False)
    rings = _point_twins(summary)
    for row in summary.itertuples():
        color = colors[str(row.policy)]
        yerr = [[row.hit_rate - row.hit_rate_lo], [row.hit_rate_hi - row.hit_rate]]
        if pd.notna(row.cost_per_success_usd):
            right.errorbar(
                row.cost_per_success_usd,
                row.hit_rate,
                yerr=yerr,
                capsize=4,
                color=color,
                **_marker(str(row.policy) in rings, color, 9),
            )
            right.plot(
                [row.cost_per_request_usd, row.cost_per_success_usd],
                [row.hit_rate, row.hit_rate],
                color=color,
                linewidth=1,
                alpha=0.5,
            )
        right.plot(
            row.cost_per_request_usd,
            row.hit_rate,
            "o",
            markerfacecolor="white",
            markeredgecolor=color,
            markersize=7,
        )
    costs = pd.concat([summary["cost_per_success_usd"], summary["cost_per_request_usd"]])
    wide = _wide(costs)  # one policy at 20x the others' cost would squeeze them into a column
    if wide:
        right.set_xscale("log")
        plain_log(right.xaxis)
    right.set(
        xlabel="USD: ● per success, ○ per request" + (" (log scale)" if wide else ""),
        ylabel="deadline hit rate (95% Wilson CI)",
        title="The trade: reliability vs what a delivered answer costs",
    )
    right.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    _legend(fig, colors, twins=lines | rings)
    if title:
        fig.suptitle(title)
    return fig


#: Points an ECDF curve is drawn with at most (evenly spaced ranks; finer than the pixels).
ECDF_POINTS = 20_000


def _ecdf(
    ax: Axes,
    requests: pd.DataFrame,
    order: list[str],
    colors: dict[str, tuple[float, float, float]],
    deadline_s: float,
    *,
    log: bool,
) -> set[str]:
    """ECDF of end-to-end latency per policy (failures count at the deadline), deadline marked;
    returns the policies drawn dashed on top because an earlier one has the same curve."""
    twins = ecdf_twins(requests, order)
    for policy in order:
        values = np.sort(requests.loc[requests["policy"].astype(str) == policy, "latency_s"])
        if log:
            values = np.clip(values, 1e-3, None)
        if len(values):
            y = np.arange(1, len(values) + 1) / len(values)
            if len(values) > ECDF_POINTS:  # a million steps draw the same curve, slowly
                keep = np.unique(np.linspace(0, len(values) - 1, ECDF_POINTS).astype(np.int64))
                values, y = values[keep], y[keep]
            twin = {"linestyle": "--", "zorder": 3} if policy in twins else {}
            ax.step(values, y, where="post", color=colors[policy], linewidth=1.8, **twin)
    ax.axvline(deadline_s, color="black", linestyle="--", linewidth=1)
    # left of the line, inside the plot: the curves have all reached their top by then
    ax.text(deadline_s, 0.03, "deadline ", ha="right", va="bottom", fontsize=9)
    if log:
        ax.set_xscale("log")
        plain_log(ax.xaxis)
    ax.set(
        xlabel="end-to-end latency of a run (s"
        + (", log scale" if log else "")
        + "), failures counted at the deadline",
        ylabel="fraction of runs done",
        title="Latency: how much of the tail the deadline cuts",
        ylim=(0, 1.02),
    )
    ax.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    return twins


def _point_twins(summary: pd.DataFrame) -> set[str]:
    """Policies whose (cost per success, hit rate) point would cover an earlier one's (none
    when a policy has several points, as in a sweep)."""
    if summary["policy"].duplicated().any():
        return set()
    rows = summary.assign(policy=summary["policy"].astype(str)).set_index("policy")
    return point_twins(rows["cost_per_success_usd"].to_dict(), rows["hit_rate"].to_dict())


def _marker(ring: bool, color: object, size: float) -> dict[str, object]:
    """errorbar keywords of a point: filled, or a larger ring drawn on top (a twin)."""
    if not ring:
        return {"fmt": "o", "markersize": size}
    return {"fmt": "o", "markersize": size + 5, "markerfacecolor": "none",
            "markeredgecolor": color, "markeredgewidth": 2.2, "zorder": 4}  # fmt: skip


def plain_log(axis: mpl.axis.Axis) -> None:
    """Plain numbers (0.2, 1, 5) on a log axis instead of powers of ten."""
    axis.set_major_formatter(mpl.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(
        mpl.ticker.FuncFormatter(lambda v, _pos: _minor_label(v, axis.get_view_interval()))
    )


def _minor_label(value: float, view: Sequence[float]) -> str:
    """Label the 2x and 5x minor ticks of a log axis, and every one when the axis spans less
    than a decade (40-90 s would otherwise show one number), so a short range still reads."""
    lead = value / 10 ** np.floor(np.log10(value))
    lo, hi = sorted(float(v) for v in view)
    if lo > 0 and hi / lo < 10:
        return f"{value:g}"
    return f"{value:g}" if round(lead) in (2, 5) else ""


def ecdf_figure(
    requests: pd.DataFrame, order: list[str], deadline_s: float, title: str = ""
) -> Figure:
    """ECDF of end-to-end latency per policy on a log x axis, the deadline marked."""
    _theme()
    colors = policy_colors(order)
    fig, ax = plt.subplots(figsize=(9, 5), layout="constrained")
    _legend(fig, colors, twins=_ecdf(ax, requests, order, colors, deadline_s, log=True))
    fig.suptitle(title or "End-to-end latency per policy")
    return fig


def pareto_figure(summary: pd.DataFrame, title: str = "", keys: Sequence[str] = ()) -> Figure:
    """Cost per success against hit rate for every row (a policy, or a policy at a sweep point),
    CI bars, the Pareto frontier circled: the policies worth considering lie on it. Every point
    is labelled where it overlaps no other label: with its policy, or in a sweep with its swept
    values (a policy's points joined in the first key's order)."""
    _theme()
    colors = policy_colors(summary["policy"].astype(str))
    fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    cost = summary["cost_per_success_usd"].to_numpy(dtype=float)
    hit = summary["hit_rate"].to_numpy(dtype=float)
    rings = _point_twins(summary)
    for row in summary.itertuples(index=False):
        if pd.isna(row.cost_per_success_usd):
            continue
        ax.errorbar(
            row.cost_per_success_usd,
            row.hit_rate,
            yerr=[[row.hit_rate - row.hit_rate_lo], [row.hit_rate_hi - row.hit_rate]],
            capsize=3,
            color=colors[str(row.policy)],
            alpha=0.9,
            **_marker(str(row.policy) in rings, colors[str(row.policy)], 7),
        )
    if keys:
        for policy, group in summary.assign(x=cost, y=hit).groupby("policy", sort=False):
            line = group.dropna(subset=["x"]).sort_values(keys[0])
            ax.plot(line["x"], line["y"], color=colors[str(policy)], lw=0.8, alpha=0.25)
    ax.margins(y=0.08)  # room above a point at 100% for its label
    if _wide(summary["cost_per_success_usd"], 5.0):  # points crowd at the cheap end
        ax.set_xscale("log")
        plain_log(ax.xaxis)
    front = pareto_frontier(cost, hit)
    if len(front):
        ax.plot(cost[front], hit[front], color="black", linewidth=1.2, linestyle=":")
        ax.plot(cost[front], hit[front], "o", markersize=15, markerfacecolor="none",
                markeredgecolor="black", markeredgewidth=1.2)  # fmt: skip
    short = [str(k).rsplit(".", 1)[-1] for k in keys]
    ax.set(
        xlabel="cost per success (USD; every billed call over delivered answers)",
        ylabel="deadline hit rate (95% CI)",
        title=title or "Pareto view: hit rate against cost per success",
    )
    ax.yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    frontier_line = Line2D([], [], color="black", linestyle=":", marker="o",
                           markerfacecolor="none", markersize=12,
                           label="Pareto frontier (circled)")  # fmt: skip
    extra = [frontier_line]
    if keys:
        extra.append(Line2D([], [], linestyle="none", label=f"labels: {', '.join(short)}"))
    _legend(fig, colors, extra, twins=rings)
    fig.canvas.draw()  # the layout settles before labels are placed by their drawn extents
    shown = [i for i in range(len(summary)) if np.isfinite(cost[i]) and np.isfinite(hit[i])]
    texts = [
        ", ".join(f"{summary.iloc[i][k]:g}" if isinstance(summary.iloc[i][k], float)
                  else str(summary.iloc[i][k]) for k in keys)
        if keys else str(summary.iloc[i]["policy"])
        for i in shown
    ]  # fmt: skip
    avoid = marker_boxes(ax, cost, hit) + marker_boxes(ax, cost[front], hit[front], 12.0)
    avoid += line_boxes(ax, cost[front], hit[front])
    labels = place_labels(ax, [(cost[i], hit[i]) for i in shown], texts, avoid, fontsize=8,
                          zorder=10, bbox={"boxstyle": "square,pad=0.1", "fc": "white",
                                           "ec": "none", "alpha": 0.8})  # fmt: skip
    for i, label in zip(shown, labels, strict=True):  # a label in its point's colour
        label.set_color(colors[str(summary.iloc[i]["policy"])])
    return fig


def call_seconds(calls: pd.DataFrame) -> pd.Series:
    """A call's wall time, sent to done (queue included)."""
    return calls["end_s"] - calls["start_s"]


def dumbbell_figure(calls: pd.DataFrame, order: list[str], title: str = "") -> Figure:
    """p50 -> p99 of successful call latency per output-size bucket and policy: the tail is not
    the workload when the ratio stays wide in every bucket."""
    _theme()
    colors = policy_colors(order)
    ok = calls[calls["outcome"] == "ok"].assign(seconds=call_seconds)
    labels = [
        f"{int(lo) + 1}-{int(hi)}" if np.isfinite(hi) else f">{int(lo)}"
        for lo, hi in itertools.pairwise(SIZE_EDGES)
    ]
    ok = ok.assign(bucket=pd.cut(ok["output_tokens"], SIZE_EDGES, right=True, labels=labels))
    rows = []
    for (bucket, policy), part in ok.groupby(["bucket", "policy"], observed=True, sort=True):
        if len(part) >= MIN_BUCKET_CALLS:
            p50, p99 = np.percentile(part["seconds"], [50, 99])
            rows.append((str(bucket), str(policy), p50, p99, len(part)))
    table = pd.DataFrame(rows, columns=["bucket", "policy", "p50", "p99", "calls"])
    buckets = list(dict.fromkeys(table["bucket"]))
    fig, ax = plt.subplots(
        figsize=(9, 1.2 + 0.55 * max(1, len(buckets) * len(order))), layout="constrained"
    )
    y = 0.0
    ticks, labels = [], []
    for bucket in buckets:
        rows_y = []
        for policy in order:
            match = table[(table["bucket"] == bucket) & (table["policy"] == policy)]
            if match.empty:
                continue
            r = match.iloc[0]
            color = colors[policy]
            ax.plot([r.p50, r.p99], [y, y], color=color, linewidth=2.5)
            ax.plot(r.p50, y, "o", color=color, markersize=8)
            ax.plot(r.p99, y, "D", color=color, markersize=7)
            ax.text(r.p99, y, f"  {r.p99 / r.p50:.1f}x", va="center", fontsize=9)
            rows_y.append(y)
            y += 1
        ticks.append(float(np.mean(rows_y)))  # one label per bucket, the policies by colour
        labels.append(f"{bucket} tok")
        if bucket != buckets[-1]:
            ax.axhline(y - 0.2, color="0.75", linewidth=0.8)
        y += 0.6
    ax.set_yticks(ticks, labels)
    ax.grid(False, axis="y")
    ax.margins(x=0.08)  # room for the ratio printed right of each p99
    ax.invert_yaxis()
    ax.set(
        xlabel="latency of a successful call (s): p50 ● to p99 ◆",
        ylabel="output tokens (bucket)",
        title=title or "The tail is not the workload: p50 -> p99 within each output-size bucket",
    )
    _legend(fig, colors)
    return fig


def step_times(calls: pd.DataFrame, step: str) -> pd.DataFrame:
    """Per run (policy, request, resend): how long `step` took, its first call sent to its first
    valid answer (or to its last call's end when it never got one), and whether it succeeded."""
    part = calls[calls["step"] == step]
    keys = ["policy", "request_id", "resend"]
    start = part.groupby(keys, observed=True)["start_s"].min()
    ok_end = part[part["outcome"] == "ok"].groupby(keys, observed=True)["end_s"].min()
    last_end = part.groupby(keys, observed=True)["end_s"].max()
    seconds = ok_end.reindex(start.index).fillna(last_end) - start
    return pd.DataFrame(
        {"seconds": seconds, "ok": ok_end.reindex(start.index).notna()}
    ).reset_index()


def strip_figure(
    calls: pd.DataFrame, order: list[str], step: str | None = None, title: str = ""
) -> Figure:
    """One dot per run: how long one step took under each policy (waited vs raced...); dots
    past the policy's p95 in red, p50 and p99 marked, std printed."""
    _theme()
    colors = policy_colors(order)
    step = step or str(calls["step"].iloc[0])
    times = step_times(calls, step)
    fig, ax = plt.subplots(figsize=(10, 5.4), layout="constrained")
    rng = np.random.default_rng(0)  # jitter only; never touches results
    names = []
    for i, policy in enumerate(order):
        values = times.loc[times["policy"].astype(str) == policy, "seconds"].to_numpy()
        if not len(values):
            names.append(policy)
            continue
        p50, p95, p99 = np.percentile(values, [50, 95, 99])
        shown = values if len(values) <= 2000 else rng.choice(values, 2000, replace=False)
        x = i + rng.uniform(-0.3, 0.3, len(shown))
        tail = shown > p95
        ax.scatter(x[~tail], shown[~tail], s=6, color=colors[policy], alpha=0.5, linewidths=0)
        ax.scatter(x[tail], shown[tail], s=9, color=TAIL_RED, alpha=0.8, linewidths=0)
        for value, style in ((p50, "-"), (p99, "--")):
            ax.plot([i - 0.38, i + 0.38], [value, value], color="black", linestyle=style, lw=1)
        # the numbers under the column's name, where they cannot crowd the next column
        names.append(f"{policy}\np50 {p50:.1f} s, p99 {p99:.1f} s\nstd {values.std():.1f} s")
    ax.set_xticks(range(len(order)), names, fontsize=9)
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set(
        xlabel="policy",
        ylabel=f"time of step {step} in one run (s)",
        title=title
        or f"Step {step}, run by run: red dots are past each policy's p95; solid p50, dashed p99",
    )
    return fig


# ---------------------------------------------------------------------------- sweeps


def sweep_figure(aggregate: pd.DataFrame, keys: list[str], title: str = "") -> Figure:
    """Hit rate (with its CI band), cost per success and cost per request of each policy against
    the first swept key; a second key, if any, splits the lines by style. One legend."""
    _theme()
    if "replications" not in aggregate:
        from sim.analysis.aggregate import aggregate_replications  # noqa: PLC0415

        aggregate = aggregate_replications(aggregate, keys)
    x_key = keys[0]
    style_key = keys[1] if len(keys) > 1 else None
    colors = policy_colors(aggregate["policy"].astype(str))
    numeric = pd.api.types.is_numeric_dtype(aggregate[x_key])
    x_values = list(dict.fromkeys(aggregate[x_key]))
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), layout="constrained")
    styles = ["-", "--", ":", "-."]
    style_values = list(dict.fromkeys(aggregate[style_key])) if style_key else [None]
    for policy, color in colors.items():
        for k, style_value in enumerate(style_values):
            part = aggregate[aggregate["policy"].astype(str) == policy]
            if style_key is not None:
                part = part[part[style_key] == style_value]
            if part.empty:
                continue
            x = part[x_key] if numeric else part[x_key].map(x_values.index)
            line = styles[k % len(styles)]
            axes[0].plot(x, part["hit_rate"], marker="o", color=color, linestyle=line)
            axes[0].fill_between(
                x, part["hit_rate_lo"], part["hit_rate_hi"], color=color, alpha=0.1, lw=0
            )
            axes[1].plot(x, part["cost_per_success_usd"], marker="o", color=color, linestyle=line)
            axes[2].plot(x, part["cost_per_request_usd"], marker="o", color=color, linestyle=line)
    method = _ci_words(aggregate)
    for ax, label, name in (
        (axes[0], "deadline hit rate", f"Hit rate\nband: 95% CI, {method}"),
        (
            axes[1],
            "cost per success (USD)",
            "What a delivered answer costs\npooled: cost / successes",
        ),
        (
            axes[2],
            "cost per request (USD, failures included)",
            "Spend per request\npooled: cost / requests",
        ),
    ):
        ax.set(xlabel=x_key, ylabel=label, title=name)
        if not numeric:
            ax.set_xticks(range(len(x_values)), [str(v) for v in x_values])
    axes[0].yaxis.set_major_formatter(mpl.ticker.PercentFormatter(1.0))
    if _wide(aggregate["cost_per_success_usd"]):
        axes[1].set_yscale("log")
        plain_log(axes[1].yaxis)
        axes[1].set_ylabel("cost per success (USD, log scale)")
    extra = [
        Line2D([], [], color="0.3", linestyle=styles[k % len(styles)], label=f"{style_key}={v}")
        for k, v in enumerate(style_values)
        if style_key is not None
    ]
    _legend(fig, colors, extra)
    fig.suptitle(title or "Sweep")
    return fig


def _wide(values: pd.Series, ratio: float = 10.0) -> bool:
    """Whether positive values span more than `ratio` x (then a log axis reads better)."""
    finite = values[np.isfinite(values) & (values > 0)]
    return len(finite) > 1 and finite.max() / finite.min() > ratio


def _ci_words(aggregate: pd.DataFrame) -> str:
    """How the band was computed, in words."""
    methods = set(aggregate.get("hit_rate_ci", pd.Series(["wilson"])))
    if methods <= {"wilson"}:
        return "Wilson over pooled runs"
    if "t+wilson" in methods:  # a folder written before the pooled rule
        return "t over replications"
    return "pooled Wilson, widened by spread"


def write_policy_comparison(
    summary: pd.DataFrame, requests: pd.DataFrame, deadline_s: float, path: Path, title: str = ""
) -> Path:
    """Draw `policy_comparison` and save it at `path`."""
    return save(policy_comparison(summary, requests, deadline_s, title), path)


def write_sweep_figure(summary: pd.DataFrame, keys: list[str], path: Path, title: str = "") -> Path:
    """Draw `sweep_figure` and save it at `path`."""
    return save(sweep_figure(summary, keys, title), path)


# ---------------------------------------------------------------------------- folders


def write_figures(folder: Path, svg: bool = False) -> list[Path]:
    """Every figure the results folder supports, from its files, into folder/figures/ (PNG, and
    SVG too with `svg`); returns the paths written."""
    return [
        path
        for name, fig in folder_figures(folder)
        for path in save_formats(fig, folder / "figures" / name, svg)
    ]


def folder_figures(folder: Path) -> list[tuple[str, Figure]]:
    """(file stem, figure) for every figure the folder's result files support."""
    if (folder / "manifest.json").is_file():
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        aggregate = pd.read_csv(folder / "summary.csv")
        keys = list(manifest["swept_keys"])
        name = manifest["scenario"]
        reps = int(aggregate["replications"].max())
        return [
            (
                "sweep",
                sweep_figure(
                    aggregate,
                    keys,
                    f"{name}: sweep of {', '.join(keys)}, "
                    f"{reps} replication{'s' if reps > 1 else ''} per point",
                ),
            ),
            (
                "pareto",
                pareto_figure(aggregate, f"{name}: every policy at every sweep point", keys),
            ),
        ]
    resolved = yaml.safe_load((folder / "scenario.resolved.yaml").read_text(encoding="utf-8"))
    deadline = float(resolved["deadline_s"])
    name = str(resolved.get("name", folder.name))
    summary = pd.read_csv(folder / "summary.csv")
    requests = pd.read_parquet(folder / "requests.parquet")
    order = [str(p) for p in summary["policy"]]
    head = f"{name}: {plural(int(summary['requests'].iloc[0]), 'request')}, deadline {deadline:g} s"
    figures = [
        ("policies", policy_comparison(summary, requests, deadline, head)),
        ("ecdf", ecdf_figure(requests, order, deadline, f"{head}: end-to-end latency")),
        ("pareto", pareto_figure(summary, f"{head}: cost per success against hit rate")),
    ]
    if (folder / "calls.parquet").is_file():
        calls = pd.read_parquet(folder / "calls.parquet")
        if len(calls):
            figures.append(("dumbbells", dumbbell_figure(calls, order)))
            figures.append(("strip", strip_figure(calls, order)))
    if (folder / "timeseries.parquet").is_file():
        series = pd.read_parquet(folder / "timeseries.parquet")
        if len(series) and int(series["resent"].sum() + series["rate_limited"].sum()):
            from sim.output.storm_plots import storm_figure  # noqa: PLC0415 - only runs with a storm

            figures.append(("storm", storm_figure(series, f"{head}: storm")))
    return figures


def save_formats(fig: Figure, stem: Path, svg: bool) -> list[Path]:
    """Save `fig` as stem.png (and stem.svg), atomically, and free it."""
    paths = [stem.with_suffix(".png")] + ([stem.with_suffix(".svg")] if svg else [])
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
        for path in paths:
            tmp = path.with_name(f".{path.name}.partial")
            fig.savefig(tmp, dpi=110, format=path.suffix[1:])
            tmp.replace(path)
    finally:
        plt.close(fig)
    return paths


def save(fig: Figure, path: Path) -> Path:
    """Save `fig` at `path` (format from the suffix), atomically, and free it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        fig.savefig(tmp, dpi=110, format=path.suffix[1:] or "png")
        tmp.replace(path)
    finally:
        plt.close(fig)
    return path


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (for embedding in a report), freed afterwards."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, dpi=100, format="png")
    finally:
        plt.close(fig)
    return buffer.getvalue()
