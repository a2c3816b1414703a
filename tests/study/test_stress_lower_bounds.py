"""A storm margin no burst tried could beat is a lower bound, and says so (issue 25, item 10):
`tailsim stress` printed `margin req 420` beside "none tried" for three policies tied at the
largest burst tried, as though 420 were measured."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console

from sim.cli.search import stress_table
from sim.output.storm_plots import stress_figure
from sim.study.stress import bound_lines, lower_bounds, margin_text, margins


def _table() -> pd.DataFrame:
    """Three policies recover from every burst tried (up to x8: 420 extra requests); one fails."""
    rows = []
    for policy, recovery in (("breaker", [0.0, 0.0]), ("guarded", [0.0, 10.0]),
                             ("shed", [5.0, 0.0]), ("retry", [0.0, math.inf])):  # fmt: skip
        for m, back in zip((4.0, 8.0), recovery, strict=True):
            rows.append({"policy": policy, "duration_s": 60.0, "multiplier": m,
                         "extra_requests": (m - 1) * 1.0 * 60.0, "recovery_s": back,
                         "recovered": math.isfinite(back)})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_margin_no_burst_beat_is_a_lower_bound() -> None:
    best = margins(_table())
    assert lower_bounds(best) == {"breaker", "guarded", "shed"}
    assert margin_text(420.0, bounded=False) == ">= 420"
    assert margin_text(180.0, bounded=True) == "180"
    lines = bound_lines(best)
    assert "recovered from every burst tried (up to x8)" in lines[0]
    assert lines[1] == "breaker, guarded, shed tie at >= 420: not ranked against each other"


def test_the_table_prints_the_bound_as_a_bound() -> None:
    console = Console(width=200, record=True)
    console.print(stress_table(margins(_table()), 120.0))
    text = console.export_text()
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│")}
    assert ">= 420" in rows["breaker"]
    assert ">= 8" in rows["breaker"]
    assert "none failed" in rows["breaker"]
    assert ">=" not in rows["retry"]  # failed at x8: its margin (x4, 180) is measured
    assert "180" in rows["retry"]


def test_the_figure_legend_says_the_bound() -> None:
    fig = stress_figure(_table(), 120.0)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "breaker (margin >= 420 extra requests)" in labels
    assert "retry (margin 180 extra requests)" in labels
