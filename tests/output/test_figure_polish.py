"""What a user sees in the figures: one colour per policy in every figure, legends inside the
figure, look-alike policies both visible, labels that neither repeat nor crowd."""

from __future__ import annotations

import itertools
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sim.output.colors import policy_colors
from sim.output.overlap import ecdf_twins, point_twins
from sim.output.plots import (
    _minor_label,
    dumbbell_figure,
    pareto_figure,
    policy_comparison,
    strip_figure,
)
from sim.output.report_html import CAPTIONS
from sim.output.storm_plots import stress_figure

RETRY_STORM = ["retry", "budget", "breaker", "shed", "guarded"]


def _stress_table(durations: tuple[float, ...] = (60.0,)) -> pd.DataFrame:
    """A stress table where breaker and guarded recover identically (as on retry-storm)."""
    rows = []
    curves = {
        "retry": [0.0, math.inf, math.inf],
        "budget": [0.0, 0.0, math.inf],
        "breaker": [0.0, 0.0, 10.0],
        "shed": [0.0, 30.0, math.inf],
        "guarded": [0.0, 0.0, 10.0],
    }
    for duration in durations:
        for policy, recovery in curves.items():
            for m, back in zip((1.5, 2.0, 3.0), recovery, strict=True):
                rows.append(
                    {
                        "policy": policy,
                        "duration_s": duration,
                        "multiplier": m,
                        "extra_requests": (m - 1) * 2.0 * duration,
                        "recovery_s": back,
                        "recovered": math.isfinite(back),
                    }
                )
    return pd.DataFrame(rows)


def _policy_lines(fig: Figure) -> list[Line2D]:
    """The data lines of the figure's first axes (reference lines have 2 points or none)."""
    return [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 2]


def _inside(fig: Figure) -> bool:
    """Whether the figure's legend lies within the figure's own box (nothing cut off)."""
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    page = fig.bbox
    return bool(box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1)


def test_stress_figure_uses_the_shared_policy_colours() -> None:
    fig = stress_figure(_stress_table(), 120.0)
    try:
        expected = {to_rgba(c) for c in policy_colors(RETRY_STORM).values()}
        drawn = {to_rgba(line.get_color()) for line in _policy_lines(fig)}
        assert drawn == expected
    finally:
        plt.close(fig)


@pytest.mark.parametrize("durations", [(60.0,), (60.0, 120.0)])
def test_stress_legend_stays_inside_the_figure(durations: tuple[float, ...]) -> None:
    fig = stress_figure(_stress_table(durations), 120.0)
    try:
        assert _inside(fig)
    finally:
        plt.close(fig)


def test_a_look_alike_policy_is_drawn_dashed_on_top_not_hidden() -> None:
    fig = stress_figure(_stress_table(), 120.0)
    try:
        colours = policy_colors(RETRY_STORM)
        by_colour = {to_rgba(line.get_color()): line for line in _policy_lines(fig)}
        breaker, guarded = (
            by_colour[to_rgba(colours["breaker"])],
            by_colour[to_rgba(colours["guarded"])],
        )
        assert breaker.get_linestyle() == "-"
        assert guarded.get_linestyle() == "--"
        assert guarded.get_zorder() > breaker.get_zorder()
        # budget shares two of three bursts with breaker: not a look-alike
        assert by_colour[to_rgba(colours["budget"])].get_linestyle() == "-"
    finally:
        plt.close(fig)


def _requests(latency: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.concat(
        [pd.DataFrame({"policy": p, "latency_s": v}) for p, v in latency.items()],
        ignore_index=True,
    )


def test_twins_are_found_by_how_close_they_look() -> None:
    rng = np.random.default_rng(3)
    base = rng.lognormal(1.0, 0.5, 2000)
    requests = _requests({"a": base, "b": base.copy(), "c": base * 1.5})
    assert ecdf_twins(requests, ["a", "b", "c"]) == {"b"}
    assert point_twins({"a": 1.0, "b": 1.001, "c": 2.0}, {"a": 0.5, "b": 0.5, "c": 0.9}) == {"b"}
    assert point_twins({"a": 1.0, "b": 1.5}, {"a": 0.5, "b": 0.5}) == set()


def test_policy_comparison_shows_both_of_two_identical_policies() -> None:
    rng = np.random.default_rng(4)
    base = rng.lognormal(1.0, 0.5, 500)
    requests = _requests({"breaker": base, "guarded": base.copy()})
    summary = pd.DataFrame(
        {
            "policy": ["breaker", "guarded"],
            "hit_rate": [0.5, 0.5],
            "hit_rate_lo": [0.45, 0.45],
            "hit_rate_hi": [0.55, 0.55],
            "cost_per_success_usd": [0.01, 0.01],
            "cost_per_request_usd": [0.005, 0.005],
        }
    )
    fig = policy_comparison(summary, requests, 30.0)
    try:
        steps = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) > 2]
        assert [line.get_linestyle() for line in steps] == ["-", "--"]
        rings = [
            line
            for line in fig.axes[1].get_lines()
            if line.get_marker() == "o" and line.get_markerfacecolor() == "none"
        ]
        assert len(rings) == 1  # guarded's point is a ring around breaker's
    finally:
        plt.close(fig)


def _calls(buckets: list[int], policies: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 400 * len(buckets) * len(policies)
    tokens = rng.choice(buckets, n)
    return pd.DataFrame(
        {
            "policy": rng.choice(policies, n),
            "outcome": "ok",
            "output_tokens": tokens,
            "step": "s1",
            "request_id": np.arange(n),
            "resend": 0,
            "start_s": 0.0,
            "end_s": rng.lognormal(1.0, 0.5, n) * tokens / 100,
        }
    )


def test_dumbbell_labels_each_bucket_once() -> None:
    policies = ["wait", "cut", "race", "hedge", "downshift"]
    for buckets in ([300], [40, 300, 1000]):
        fig = dumbbell_figure(_calls(buckets, policies), policies)
        try:
            labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
            assert len(labels) == len(buckets)
            assert len(set(labels)) == len(labels)
        finally:
            plt.close(fig)


def test_strip_statistics_sit_under_their_own_column() -> None:
    policies = ["wait", "cut", "race", "hedge", "downshift"]
    fig = strip_figure(_calls([300], policies), policies, "s1")
    try:
        ax = fig.axes[0]
        assert len(ax.texts) == 0  # nothing floats beside a column into the next one
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert [label.split("\n")[0] for label in labels] == policies
        assert all("p50" in label and "p99" in label and "std" in label for label in labels)
        fig.canvas.draw()
        boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes))  # no overlap
    finally:
        plt.close(fig)


def test_sweep_pareto_labels_its_frontier_and_the_caption_matches() -> None:
    aggregate = pd.DataFrame(
        {
            "providers.direct.concurrency": [24, 48, 24, 48],
            "policy": ["wait", "wait", "race", "race"],
            "hit_rate": [0.1, 0.84, 0.98, 0.99],
            "hit_rate_lo": [0.08, 0.8, 0.96, 0.98],
            "hit_rate_hi": [0.12, 0.87, 0.99, 1.0],
            "cost_per_success_usd": [1.6, 0.21, 0.36, 0.36],
        }
    )
    fig = pareto_figure(aggregate, "sweep", ["providers.direct.concurrency"])
    try:
        # every point carries its swept value (issue 25, item 9: only the frontier was
        # labelled, "concurrency=48"); the key is named once, in the legend
        texts = sorted(t.get_text() for t in fig.axes[0].texts)
        assert texts == ["24", "24", "48", "48"]
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "labels: concurrency" in legend
    finally:
        plt.close(fig)
    assert "dotted line is" not in CAPTIONS["pareto"]
    assert "circled" in CAPTIONS["pareto"]


def test_a_log_axis_under_a_decade_labels_every_minor_tick() -> None:
    assert [_minor_label(v, (40.0, 95.0)) for v in (40.0, 60.0, 70.0)] == ["40", "60", "70"]
    assert [_minor_label(v, (0.5, 300.0)) for v in (3.0, 5.0, 20.0)] == ["", "5", "20"]
