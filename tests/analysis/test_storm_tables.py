"""Storm numbers: the new summary metrics by hand, timeseries.parquet's counts, recovery(), and
schedule arrivals (their rates and their common random numbers)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.analysis.metrics import SUMMARY_METRICS, peak_tpm_share, summarize
from sim.analysis.timeseries import TIMESERIES_COLUMNS, recovery, timeseries
from sim.model.arrivals import arrival_times, bursts
from sim.model.config import ArrivalsSpec
from tests.helpers import build, simulate


def _calls(rows: list[tuple[int, int, str, float, int, int]]) -> pd.DataFrame:
    """(request, attempt, outcome, start_s, quota_tokens, sdk_retry) rows of policy 'p'."""
    return pd.DataFrame(
        {
            "policy": "p",
            "request_id": [r[0] for r in rows],
            "resend": 0,
            "step": "s",
            "attempt": [r[1] for r in rows],
            "provider": "api",
            "model": "m",
            "start_s": [r[3] for r in rows],
            "end_s": [r[3] + 1.0 for r in rows],
            "outcome": [r[2] for r in rows],
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "quota_tokens": [r[4] for r in rows],
            "sdk_retry": [r[5] for r in rows],
        }
    )


def _runs(rows: list[tuple[int, int, float, float, bool, str]]) -> pd.DataFrame:
    """(request, resend, arrival_s, end_s, ok, fail_reason) rows of policy 'p'."""
    return pd.DataFrame(
        {
            "policy": "p",
            "request_id": [r[0] for r in rows],
            "resend": [r[1] for r in rows],
            "arrival_s": [r[2] for r in rows],
            "latency_s": [r[3] - r[2] if r[4] else 30.0 for r in rows],
            "ok": [r[4] for r in rows],
            "cost_usd": 0.0,
            "tokens": 0,
            "calls": 1,
            "end_s": [r[3] for r in rows],
            "fail_reason": [r[5] for r in rows],
            "fail_step": "",
        }
    )


def test_storm_metrics_by_hand() -> None:
    """Runs: request 0 ok at 11 s; request 1 shed at 5 s, re-sent at 10 s and ok at 21 s.
    Calls: 3 primaries, 1 retry, 1 SDK retry, 1 hedge; 3 ok."""
    runs = _runs(
        [(0, 0, 1.0, 11.0, True, ""), (1, 0, 5.0, 5.0, False, "shed"), (1, 1, 10.0, 21.0, True, "")]
    )
    calls = _calls(
        [
            (0, 0, "rate_limited", 1.0, 0, 0),
            (0, 0, "ok", 2.0, 100, 1),
            (0, 1, "cancelled", 3.0, 100, 0),
            (1, 0, "ok", 10.0, 100, 0),
            (1, 0, "error", 11.0, 100, 0),
            (1, 1, "ok", 12.0, 100, 0),
        ]
    )
    row = summarize(runs, calls, tpm={("api", None): 400}, breaker_open={"p": 7.5}).iloc[0]
    assert list(row.index) == list(SUMMARY_METRICS)
    assert row["calls_per_success"] == 3.0  # 6 calls / 2 successes
    assert row["goodput_per_s"] == pytest.approx(2 / 20.0)  # 2 successes, 1 s to 21 s
    assert row["hedge_rate"] == pytest.approx(2 / 3)  # 2 extra policy attempts / 3 primaries
    assert row["shed_requests"] == 1
    assert row["breaker_open_s"] == 7.5
    assert row["peak_tpm_share"] == pytest.approx(500 / 400)


def test_peak_tpm_share_uses_a_sliding_minute() -> None:
    calls = _calls([(0, 0, "ok", t, 100, 0) for t in (0.0, 30.0, 59.0, 61.0, 200.0)])
    # windows (t - 60, t]: {0, 30, 59} and {30, 59, 61} hold 300 tokens at most
    assert peak_tpm_share(calls, {("api", None): 1000}) == pytest.approx(0.3)
    assert math.isnan(peak_tpm_share(calls, {}))
    assert peak_tpm_share(calls, {("api", "m"): 100}) == pytest.approx(3.0)


def test_breaker_open_is_nan_when_unknown() -> None:
    runs = _runs([(0, 0, 0.0, 1.0, True, "")])
    calls = _calls([(0, 0, "ok", 0.0, 0, 0)])
    assert math.isnan(summarize(runs, calls).iloc[0]["breaker_open_s"])


def test_timeseries_counts_add_up_to_the_tables() -> None:
    runs = _runs(
        [(0, 0, 1.0, 11.0, True, ""), (1, 0, 5.0, 5.0, False, "shed"), (1, 1, 10.0, 21.0, True, "")]
    )
    calls = _calls(
        [
            (0, 0, "rate_limited", 1.0, 0, 0),
            (0, 0, "ok", 2.0, 100, 1),
            (1, 0, "ok", 10.0, 100, 0),
            (1, 1, "ok", 12.0, 100, 0),
        ]
    )
    series = timeseries(runs, calls, 10.0, bursts=[(4.0, 6.0)])
    assert list(series.columns) == list(TIMESERIES_COLUMNS)
    assert series["t_s"].tolist() == [0.0, 10.0, 20.0]
    assert series["offered"].tolist() == [2, 0, 0]
    assert series["resent"].tolist() == [0, 1, 0]
    assert series["started"].tolist() == [2, 2, 0]
    assert series["succeeded"].tolist() == [0, 1, 1]
    assert series["rate_limited"].tolist() == [1, 0, 0]
    assert series["in_flight"].tolist() == [1, 0, 0]  # the call sent at 10 s is out at 10 s
    assert series["tpm_used"].tolist() == [600.0, 1200.0, 0.0]
    assert series["burst"].tolist() == [True, False, False]


def test_timeseries_of_a_real_run_conserves_every_count() -> None:
    scenario = build(policies={"w": {"kind": "wait", "retries": 1}})
    result = simulate(scenario, "w", arrivals=np.linspace(0, 50, 40).tolist())
    series = timeseries(result.requests, result.calls, 5.0)
    assert series["offered"].sum() == 40
    assert series["started"].sum() == len(result.calls)
    assert series["succeeded"].sum() == result.requests["ok"].sum()
    assert (series["in_flight"] >= 0).all()
    assert series["in_flight"].max() >= 1


def test_recovery_reads_level_after_and_time_back() -> None:
    """Goodput 2/s, 0 during a burst at [100, 120) and for 20 s after it, then 2/s again."""
    t = np.arange(0, 300, 10.0)
    rate = np.where((t >= 100) & (t < 140), 0.0, 2.0)
    series = pd.DataFrame({"policy": "p", "t_s": t, "succeeded": rate * 10})
    level, after, back = recovery(series, "p", (100.0, 120.0))
    assert (level, after, back) == (2.0, 2.0, 20.0)
    never = series.assign(succeeded=np.where(t >= 100, 0.0, 20.0))
    assert recovery(never, "p", (100.0, 120.0))[2] == math.inf


def test_schedule_arrivals_follow_their_rates_and_share_draws() -> None:
    """Counts per segment within 4 SE of rate x length; and two schedules differing only in
    their burst give the same arrivals before it (common random numbers)."""
    base = {"kind": "schedule", "rate_per_s": 2.0}
    calm = ArrivalsSpec(**base, segments=[{"duration_s": 200, "rate_per_s": 2.0}])
    burst = ArrivalsSpec(
        **base,
        segments=[{"duration_s": 200, "rate_per_s": 2.0}, {"duration_s": 100, "rate_per_s": 8.0}],
    )
    rng = np.random.default_rng
    times = arrival_times(burst, 3000, rng(5))
    for (a, b), rate in (((0, 200), 2.0), ((200, 300), 8.0), ((300, 500), 2.0)):
        count = int(((times >= a) & (times < b)).sum())
        expected = rate * (b - a)
        assert abs(count - expected) < 4 * math.sqrt(expected), (a, b, count)
    other = arrival_times(calm, 3000, rng(5))
    before = times[times < 200]
    np.testing.assert_array_equal(before, other[: len(before)])
    assert bursts(burst) == [(200.0, 300.0)]
    assert bursts(calm) == []
