"""Figures and the report's pieces (sim.output, sim.analysis.reading): pooled cost per success
never flatters failure, the Pareto frontier, one colour per policy, and the reading's words.
Plot and report on real results folders are in tests/integration/test_figures_report.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.analysis.aggregate import aggregate_replications
from sim.analysis.reading import pareto_frontier, read_policies
from sim.output.colors import policy_colors


def test_pooled_cost_per_success_never_flatters_failure() -> None:
    stacked = pd.DataFrame(
        {
            "k": [1, 1],
            "policy": ["p", "p"],
            "replication": [0, 1],
            "requests": [100, 100],
            "runs": [100, 100],
            "hit_rate": [1.0, 0.1],
            "cost_per_request_usd": [1.0, 1.0],
            "cost_per_success_usd": [1.0, 10.0],
        }
    )
    row = aggregate_replications(stacked, ["k"]).iloc[0]
    assert row["cost_per_success_usd"] == pytest.approx(200 / 110)  # pooled, not mean of ratios
    assert row["hit_rate"] == pytest.approx(0.55)


def test_pareto_frontier_keeps_only_undominated_points() -> None:
    cost = np.array([1.0, 2.0, 1.5, 3.0, np.nan])
    hit = np.array([0.8, 0.95, 0.7, 0.9, 1.0])
    assert list(pareto_frontier(cost, hit)) == [0, 1]


def test_a_policy_keeps_its_colour_in_every_figure() -> None:
    a = policy_colors(["wait", "race", "mine"])
    b = policy_colors(["race", "hedge", "wait"])
    assert a["wait"] == b["wait"]
    assert a["race"] == b["race"]
    assert len({a["wait"], a["race"], a["mine"]}) == 3


def test_reading_says_when_differences_are_noise() -> None:
    summary = pd.DataFrame(
        {
            "policy": ["wait", "cut", "race"],
            "hit_rate": [0.80, 0.97, 0.975],
            "hit_rate_lo": [0.77, 0.96, 0.965],
            "hit_rate_hi": [0.83, 0.98, 0.985],
            "cost_per_request_usd": [0.10, 0.11, 0.20],
            "cost_per_success_usd": [0.125, 0.113, 0.205],
            "rate_limited_per_request": [0.0, 0.0, 0.3],
        }
    )
    text = " ".join(read_policies(summary))
    assert "race meets the deadline most often" in text
    assert "Within noise of race (95% intervals overlap): cut" in text
    assert "Cheapest per delivered answer: cut" in text
    assert "race met 0.30 rate-limited calls" in text


def test_reading_never_rounds_a_rare_miss_away() -> None:
    """A policy at 99.98% is not "100.0%" in the reading (it once was: `.1%` formatting)."""
    summary = pd.DataFrame(
        {
            "policy": ["race", "hedge"],
            "hit_rate": [1.0, 0.9998],
            "hit_rate_lo": [0.99923, 0.99887],
            "hit_rate_hi": [1.0, 0.99996],
            "cost_per_request_usd": [0.36, 0.20],
            "cost_per_success_usd": [0.36, 0.20],
            "rate_limited_per_request": [0.0, 0.0],
        }
    )
    text = " ".join(read_policies(summary))
    assert "hedge (99.98% [99.9%, 99.996%])" in text
    assert "race meets the deadline most often: 100.0% [99.9%, 100.0%]" in text
