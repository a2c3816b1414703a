"""Every figure, drawn and read for what a reader would trip on (issue 25, item 9): text cut at
the figure's edge, tick labels on top of each other, one tick labelled, a linear axis squeezing
five policies into one column, a panel's peak cut by a shared axis, a legend entry that shades
nothing, points without a label. Each figure is drawn, then measured from what the renderer
draws (`tests/output/figure_text.py`)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from sim.calibration.log_readers import read_call_logs
from sim.calibration.plots import fit_figure
from sim.calibration.report import bucket_table, fit_calls
from sim.calibration.synth import synth_calls
from sim.model.scenario import load_scenario
from sim.output.plots import pareto_figure, policy_comparison
from sim.output.storm_plots import storm_figure, stress_figure
from sim.plan import compile_scenario
from sim.rare.output import nines_figure
from sim.study.runner import run
from tests.output.figure_text import (
    clipped_texts,
    outside_axes,
    overlapping,
    overlapping_ticks,
    tick_labels,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "data" / "figures" / "agent-workflow.yaml"
AZURE = ROOT / "scenarios" / "azure-code-burst.yaml"
THEFASTEST = ROOT / "experiments" / "data" / "thefastest-ai" / "thefastest_ai_requests.csv"


@pytest.fixture
def close():
    """Close every figure a test draws."""
    yield
    plt.close("all")


def _readable(fig: Figure) -> None:
    assert clipped_texts(fig) == []
    assert outside_axes(fig) == []
    assert overlapping_ticks(fig) == []


# ------------------------------------------------------------------ policies.png


@pytest.fixture(scope="module")
def agent_run():
    """The agent workflow: `escalate` costs ~18x the others per success."""
    return run(compile_scenario(load_scenario(AGENT)), requests=600)


def test_a_costly_policy_does_not_squeeze_the_others_into_a_column(agent_run, close) -> None:
    summary, requests = agent_run.summary, agent_run.requests
    per_success = summary.set_index("policy")["cost_per_success_usd"]
    assert per_success["escalate"] > 15 * per_success.drop("escalate").max() / 2  # the case
    fig = policy_comparison(summary, requests, 40.0, "agent")
    right = fig.axes[1]
    assert right.get_xscale() == "log"
    fig.canvas.draw()
    cheap = per_success.drop("escalate")
    pixels = right.transData.transform(np.column_stack([cheap, np.full(len(cheap), 0.99)]))[:, 0]
    width = right.get_window_extent().width
    # linear, the cheap four sat in 5% of the axis; on a log axis they spread over a fifth
    assert (pixels.max() - pixels.min()) / width > 0.15
    _readable(fig)


# ------------------------------------------------------------------ storm.png


def _series(burst: bool) -> pd.DataFrame:
    """Two policies over 60 bins of 10 s; the second's calls peak at 3x the first's."""
    rows = []
    for policy, peak in (("wait", 30.0), ("race", 90.0)):
        for k in range(60):
            t = 10.0 * k
            high = 25 <= k < 31
            rows.append({"policy": policy, "t_s": t, "offered": 20.0, "resent": 5.0 * high,
                         "started": (peak if high else 25.0) * 10, "succeeded": 18.0,
                         "rate_limited": 40.0 * high, "burst": burst and high})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("burst", [True, False])
def test_the_storm_figure_cuts_no_panel_and_shades_what_it_names(burst: bool, close) -> None:
    fig = storm_figure(_series(burst), "storm")
    top = fig.axes[0].get_ylim()[1]
    for ax in fig.axes:
        for line in ax.get_lines():
            assert np.nanmax(line.get_ydata()) <= top  # the race panel's 90/s peak is shown
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert ("scheduled burst" in legend) == burst  # bursty / trace arrivals: nothing shaded
    _readable(fig)


# ------------------------------------------------------------------ stress.png


def _stress(multipliers: tuple[float, ...], durations: tuple[float, ...] = (60.0,)) -> pd.DataFrame:
    rows = []
    for duration in durations:
        for policy, limit in (("retry", 1.8), ("breaker", math.inf), ("shed", 2.5)):
            for m in multipliers:
                back = 0.0 if m < limit else math.inf
                rows.append({"policy": policy, "duration_s": duration, "multiplier": m,
                             "extra_requests": (m - 1) * 60.0, "recovery_s": back,
                             "recovered": math.isfinite(back)})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("multipliers", "durations"),
    [((3.0,), (60.0,)), ((1.5, 1.75, 1.812, 1.875, 2.0, 3.0, 4.0, 6.0, 8.0), (60.0, 120.0))],
)
def test_the_stress_figure_labels_several_ticks_apart(multipliers, durations, close) -> None:
    fig = stress_figure(_stress(multipliers, durations), 120.0)
    fig.canvas.draw()  # tick labels get their text when drawn
    for ax in fig.axes:
        assert len(tick_labels(ax.xaxis)) >= 3  # one multiplier tried: 2x 3x 4x, not 3x alone
    _readable(fig)


# ------------------------------------------------------------------ pareto.png


def _sweep(names: list[str]) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    rows = []
    for i, policy in enumerate(names):
        for c in (24, 32, 48, 64):
            hit = 0.1 if c == 24 else min(0.999, 0.7 + 0.05 * i + 0.003 * c)
            cost = (1.4 + 0.05 * i if c == 24 else 0.2 + 0.03 * i) * rng.uniform(0.97, 1.03)
            rows.append({"providers.direct.concurrency": c, "policy": policy, "hit_rate": hit,
                         "hit_rate_lo": hit - 0.02, "hit_rate_hi": min(1.0, hit + 0.02),
                         "cost_per_success_usd": cost})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "names",
    [
        ["wait", "cut", "race", "hedge", "downshift"],
        [
            "wait",
            "cut_at_p95_then_retry",
            "race_two_providers",
            "hedge_after_p90",
            "downshift_to_small",
            "adaptive_tuned",
            "draft_race",
        ],  # a legend too wide for a row
    ],
)
def test_every_sweep_point_is_labelled_and_no_label_covers_another(names, close) -> None:
    aggregate = _sweep(names)
    fig = pareto_figure(aggregate, "sweep", ["providers.direct.concurrency"])
    labels = fig.axes[0].texts
    assert sorted(t.get_text() for t in labels) == sorted(
        str(c) for c in aggregate["providers.direct.concurrency"]
    )
    assert overlapping(list(labels), fig) == []
    _readable(fig)  # the legend too: it used to run off both edges


def test_a_runs_pareto_labels_its_policies(agent_run, close) -> None:
    fig = pareto_figure(agent_run.summary, "agent")
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == sorted(agent_run.summary["policy"].astype(str))
    assert overlapping(list(fig.axes[0].texts), fig) == []
    _readable(fig)


# ------------------------------------------------------------------ the fit figure


@pytest.mark.parametrize("log", ["azure", "thefastest"])
def test_the_fit_figure_ticks_stand_apart(log: str, close) -> None:
    """The azure-code-burst log's `small` panel labelled 3x10^0 over 4x10^0, and every ratio
    ran past the dumbbells' frame; the thefastest.ai log fills the grid (16 panels)."""
    if log == "azure":
        calls = synth_calls(compile_scenario(load_scenario(AZURE)), requests=400)
        fits, _ = fit_calls(calls, seed=0)
    else:
        calls, _ = read_call_logs([THEFASTEST])
        fits, _ = fit_calls(calls, min_calls=60, seed=0)
    fig = fit_figure(fits, bucket_table(fits))
    _readable(fig)


# ------------------------------------------------------------------ nines.png


@pytest.mark.parametrize("miss", [5e-5, 0.03])  # 0.03: the axis ends at 10^-1, "90%" at its edge
def test_the_nines_labels_stay_inside(miss: float, close) -> None:
    table = pd.DataFrame(
        {
            "policy": ["race", "hedge"],
            "miss_probability": [miss, 2 * miss],
            "ci_lo": [0.8 * miss, 1.7 * miss],
            "ci_hi": [1.2 * miss, 2.5 * miss],
        }
    )
    result = SimpleNamespace(table=table, method="importance",
                             plan=SimpleNamespace(name="nines", deadline_s=160.0))  # fmt: skip
    fig = nines_figure(result)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("met to the left" in t for t in texts)
    _readable(fig)
