"""Which policies a figure would hide: a line or point drawn exactly over an earlier policy's.

Policies that behave alike (a circuit breaker and `guarded`, which contains it, on retry-storm)
draw the same curve; drawn plainly, the later one covers the earlier and a reader sees one policy
too few. The figures draw such a "twin" dashed (lines) or as a ring (points), on top, so both
show. Closeness is judged relative to the axis span, as the eye would.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

#: Percentile levels (of each policy) two latency ECDFs are compared at.
LEVELS = np.linspace(0.0, 1.0, 101)
#: Two curves or points closer than this share of the axis span look like one.
CLOSE = 0.01


def ecdf_twins(requests: pd.DataFrame, order: Sequence[str], close: float = CLOSE) -> set[str]:
    """Policies whose latency ECDF (column `latency_s`) lies within `close` of an earlier
    policy's everywhere (the largest vertical gap, the Kolmogorov-Smirnov distance, measured at
    every percentile of either)."""
    values = {}
    for policy in order:
        column = requests.loc[requests["policy"].astype(str) == policy, "latency_s"]
        if len(column):
            values[policy] = np.sort(column.to_numpy(dtype=float))
    grid = np.unique(np.concatenate([np.quantile(v, LEVELS) for v in values.values()] or [[]]))
    cdf = {p: np.searchsorted(v, grid, side="right") / len(v) for p, v in values.items()}
    names = list(cdf)
    return {
        name
        for i, name in enumerate(names)
        if any(np.max(np.abs(cdf[name] - cdf[e])) <= close for e in names[:i])
    }


def point_twins(x: Mapping[str, float], y: Mapping[str, float], close: float = CLOSE) -> set[str]:
    """Policies whose (x, y) point lies within `close` of both axis spans of an earlier one's
    (NaN points are never drawn, so never twins)."""
    names = [p for p in x if np.isfinite(x[p]) and np.isfinite(y[p])]
    if len(names) < 2:
        return set()
    xs, ys = np.array([x[p] for p in names]), np.array([y[p] for p in names])
    x_span = float(xs.max() - xs.min()) or abs(float(xs.max())) or 1.0
    y_span = float(ys.max() - ys.min()) or abs(float(ys.max())) or 1.0
    return {
        name
        for i, name in enumerate(names)
        if any(
            abs(xs[i] - xs[j]) <= close * x_span and abs(ys[i] - ys[j]) <= close * y_span
            for j in range(i)
        )
    }


def curve_twins(
    curves: Mapping[tuple[str, Hashable], tuple[np.ndarray, np.ndarray]],
    policies: Sequence[str],
    panels: Sequence[Hashable],
    tolerance: float,
) -> set[str]:
    """Policies whose curve (x, y), in some panel, matches an earlier policy's at 80% or more
    of the 3+ x values both have (y within `tolerance`)."""
    twins = set()
    for i, policy in enumerate(policies):
        for panel in panels:
            x, y = curves[policy, panel]
            for earlier in policies[:i]:
                x0, y0 = curves[earlier, panel]
                shared, a, b = np.intersect1d(x, x0, return_indices=True)
                if len(shared) >= 3 and np.mean(np.abs(y[a] - y0[b]) <= tolerance) >= 0.8:
                    twins.add(policy)
    return twins


def legend_handle(policy: str, colour: object, twin: bool, label: str = "") -> Line2D:
    """A legend entry drawn as the policy is: solid and filled, or dashed and hollow (a twin)."""
    return Line2D(
        [],
        [],
        color=colour,
        marker="o",
        linewidth=2,
        linestyle="--" if twin else "-",
        markerfacecolor="white" if twin else colour,
        label=label or policy,
    )
