"""sim.analysis.metrics: the summary of a hand-made requests/calls table, number by number."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.analysis.metrics import CALL_COLUMNS, REQUEST_COLUMNS, SUMMARY_METRICS, summarize

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval, written out independently of sim.analysis.analytic."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def requests_table(policy: str, rows: list[tuple[int, int, float, bool]]) -> pd.DataFrame:
    """Runs as (request_id, resend, latency_s, ok); other columns filled plainly."""
    return pd.DataFrame(
        [
            {
                "policy": policy,
                "request_id": rid,
                "resend": resend,
                "arrival_s": 10.0 * rid,
                "latency_s": latency,
                "ok": ok,
                "cost_usd": 0.0,
                "tokens": 0,
                "calls": 0,
            }
            for rid, resend, latency, ok in rows
        ],
        columns=list(REQUEST_COLUMNS),
    )


def calls_table(
    policy: str, rows: list[tuple[int, int, int, str, int, int, float]]
) -> pd.DataFrame:
    """Calls as (request_id, resend, attempt, outcome, input_tokens, output_tokens, cost_usd)."""
    return pd.DataFrame(
        [
            {
                "policy": policy,
                "request_id": rid,
                "resend": resend,
                "step": "s1",
                "attempt": attempt,
                "provider": "p",
                "model": "m",
                "start_s": 0.0,
                "queue_s": 0.0,
                "ttft_s": 0.5,
                "end_s": 1.0,
                "outcome": outcome,
                "input_tokens": tin,
                "output_tokens": tout,
                "cost_usd": cost,
            }
            for rid, resend, attempt, outcome, tin, tout, cost in rows
        ],
        columns=list(CALL_COLUMNS),
    )


# 4 requests, 5 runs (request 3 was re-sent once and then succeeded), 3 successes.
RUNS_A = [
    (0, 0, 1.0, True),
    (1, 0, 2.0, False),
    (2, 0, 3.0, True),
    (3, 0, 4.0, False),
    (3, 1, 5.0, True),
]
CALLS_A = [
    (0, 0, 0, "ok", 100, 10, 0.10),
    (1, 0, 0, "error", 0, 0, 0.0),
    (1, 0, 1, "timeout", 100, 5, 0.05),
    (2, 0, 0, "ok", 100, 10, 0.10),
    (2, 0, 1, "cancelled", 50, 0, 0.02),
    (3, 0, 0, "rate_limited", 0, 0, 0.0),
    (3, 0, 1, "invalid", 100, 0, 0.03),
    (3, 1, 0, "ok", 100, 10, 0.10),
]
RUNS_B = [(0, 0, 10.0, True), (1, 0, 20.0, True)]
CALLS_B = [(0, 0, 0, "ok", 1000, 100, 1.0), (1, 0, 0, "ok", 1000, 100, 1.0)]


@pytest.fixture
def summary() -> pd.DataFrame:
    """The summary of policies b then a (b listed first on purpose)."""
    requests = pd.concat([requests_table("b", RUNS_B), requests_table("a", RUNS_A)])
    calls = pd.concat([calls_table("a", CALLS_A), calls_table("b", CALLS_B)])
    return summarize(requests.reset_index(drop=True), calls.reset_index(drop=True))


def test_summary_has_every_metric_in_policy_order(summary: pd.DataFrame) -> None:
    assert list(summary.columns) == list(SUMMARY_METRICS)
    assert summary["policy"].tolist() == ["b", "a"]


def test_summary_numbers_are_exact(summary: pd.DataFrame) -> None:
    a = summary.set_index("policy").loc["a"]
    lo, hi = wilson(3, 5)
    expected = {
        "requests": 4,
        "runs": 5,
        "hit_rate": 0.6,
        "hit_rate_lo": lo,
        "hit_rate_hi": hi,
        "p50_s": 3.0,
        "p95_s": 4.8,  # linear interpolation: 4 + 0.8 * (5 - 4)
        "p99_s": 4.96,
        "mean_s": 3.0,
        "std_s": math.sqrt(2.0),  # population std of 1..5
        "cost_per_request_usd": 0.40 / 4,
        "cost_per_success_usd": 0.40 / 3,
        "tokens_per_request": 585 / 4,
        "calls_per_request": 8 / 4,
        "customer_success_rate": 3 / 4,
        "retry_amplification": 5 / 4,
        "extra_attempts_per_request": 3 / 4,
        "timeouts_per_request": 1 / 4,
        "cancelled_per_request": 1 / 4,
        "rate_limited_per_request": 1 / 4,
        "wasted_cost_share": 0.10 / 0.40,
    }
    for name, value in expected.items():
        assert a[name] == pytest.approx(value, rel=1e-12), name


def test_wilson_interval_values(summary: pd.DataFrame) -> None:
    a = summary.set_index("policy").loc["a"]
    # known value for 3 of 5 at 95%: (0.2307, 0.8824)
    assert a["hit_rate_lo"] == pytest.approx(0.23072, abs=1e-4)
    assert a["hit_rate_hi"] == pytest.approx(0.88236, abs=1e-4)


def test_policies_are_summarised_apart(summary: pd.DataFrame) -> None:
    b = summary.set_index("policy").loc["b"]
    assert (b["requests"], b["runs"], b["hit_rate"]) == (2, 2, 1.0)
    assert b["p50_s"] == 15.0
    assert b["cost_per_request_usd"] == 1.0
    assert b["cost_per_success_usd"] == 1.0
    assert b["tokens_per_request"] == 1100.0
    assert b["retry_amplification"] == 1.0
    assert b["wasted_cost_share"] == 0.0
    lo, hi = wilson(2, 2)
    assert (b["hit_rate_lo"], b["hit_rate_hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert b["hit_rate_hi"] == pytest.approx(1.0)


def test_no_success_and_no_cost() -> None:
    requests = requests_table("z", [(0, 0, 90.0, False), (1, 0, 90.0, False)])
    calls = calls_table("z", [(0, 0, 0, "error", 0, 0, 0.0), (1, 0, 0, "error", 0, 0, 0.0)])
    z = summarize(requests, calls).iloc[0]
    assert z["hit_rate"] == 0.0
    assert np.isnan(z["cost_per_success_usd"])
    assert z["cost_per_request_usd"] == 0.0
    assert z["wasted_cost_share"] == 0.0
    assert z["hit_rate_lo"] == 0.0
    assert z["hit_rate_hi"] == pytest.approx(wilson(0, 2)[1])
    assert z["p99_s"] == 90.0
    assert z["std_s"] == 0.0


def test_metric_names_carry_units() -> None:
    for name, (unit, meaning) in SUMMARY_METRICS.items():
        assert meaning
        if name.endswith("_per_s"):  # a rate: per second of simulated time
            assert unit.endswith("/s")
        elif name.endswith("_s"):
            assert unit == "s"
        if name.endswith("_usd"):
            assert unit == "USD"


def test_quality_mean_averages_the_answering_models_over_successful_runs() -> None:
    """Run 0 answered s1 with m (0.8) and s2 with m2 (0.4): mean 0.6; run 1 with m twice: 0.8;
    run 2 failed and does not count, whatever its answers. Mean over runs: 0.7."""
    requests = requests_table("a", [(0, 0, 1.0, True), (1, 0, 1.0, True), (2, 0, 1.0, False)])
    calls = calls_table("a", [(0, 0, 0, "ok", 1, 1, 0.0), (0, 0, 1, "ok", 1, 1, 0.0)])
    calls.loc[1, ["step", "model"]] = ["s2", "m2"]
    more = calls_table(
        "a",
        [(1, 0, 0, "ok", 1, 1, 0.0), (1, 0, 0, "ok", 1, 1, 0.0), (2, 0, 0, "ok", 1, 1, 0.0)],
    )
    calls = pd.concat([calls, more], ignore_index=True)
    calls.loc[4, "model"] = "m2"  # run 2 failed: its m2 answer must not count
    row = summarize(requests, calls, {"m": 0.8, "m2": 0.4}).iloc[0]
    assert row["quality_mean"] == pytest.approx(0.7, abs=1e-12)
    assert math.isnan(summarize(requests, calls).iloc[0]["quality_mean"])  # no qualities given
