"""A block fitted from a real trace (the bundled thefastest.ai log, MIT) drives a scenario whose
uncontended step latency is compared with the trace's p50 / p95 / p99, per provider and model
with at least 60 calls (29 groups of 60-95 calls; smaller ones have no p99 worth the name).

A percentile matches when the simulated value is within 5% of the log's, or inside the log
percentile's own 95% order-statistic interval (a p99 of 95 calls is the 94th or 95th call, so its
uncertainty is often far wider than 5%). The groups listed in MISMATCHED are those the model
family cannot match, each with the reason; the test checks that the others match and that each
listed one really does not (so the list cannot silently go stale). Seeds fixed: fit seed 0,
replay seed 1, 10,000 requests (Monte Carlo SE of a simulated p99 about 1-2%).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.analysis.fit_report import fit_calls
from sim.analysis.log_readers import read_call_logs
from sim.study.fit_check import order_interval, replay

LOG = Path(__file__).parents[2] / "experiments/data/thefastest-ai/thefastest_ai_requests.csv"

#: A bounded tail: the log's p99 sits within a few % of its largest call (the calls stop at a
#: ceiling); a lognormal body plus an additive stall has no ceiling, so its p99 overshoots.
BOUNDED = "bounded tail: p99 overshoots a log whose calls stop at a ceiling"
MISMATCHED: dict[tuple[str, str], str] = {
    ("anthropic", "claude-3-haiku-20240307"): BOUNDED + " (and two region modes at p95)",
    ("anthropic", "claude-3-sonnet-20240229"): BOUNDED,
    ("anthropic", "claude-instant-1.2"): BOUNDED,
    ("azure.eastus2", "gpt-3.5-turbo"): BOUNDED,
    ("azure.eastus2", "gpt-4-1106-preview"): "multimodal (regions): the median misplaced by 7%",
    ("azure.westus", "gpt-3.5-turbo-1106"): BOUNDED,
    ("cohere", "command-r-plus"): BOUNDED,
    ("openai", "gpt-3.5-turbo-1106"): BOUNDED,
    ("perplexity.ai", "mixtral-8x7b-instruct"): BOUNDED,
    ("together.ai", "llama-2-13b-chat"): BOUNDED,
    ("together.ai", "llama-2-70b-chat"): BOUNDED,
    ("together.ai", "llama-2-7b-chat"): BOUNDED,
}


@pytest.fixture(scope="module")
def compared() -> pd.DataFrame:
    calls, garbage = read_call_logs([LOG])
    assert garbage[str(LOG)].total == 0
    fits, _ = fit_calls(calls, min_calls=60, seed=0)
    assert len(fits) == 29
    table = replay(fits, requests=10_000, seed=1)
    table["matches"] = table["within_tolerance"] | table["within_interval"]
    return table


def test_fitted_blocks_reproduce_the_trace_percentiles(compared: pd.DataFrame) -> None:
    groups = compared.groupby(["provider", "model"])["matches"].all()
    unmatched = {key for key, ok in groups.items() if not ok}
    assert unmatched <= set(MISMATCHED), f"new mismatches: {unmatched - set(MISMATCHED)}"
    assert set(MISMATCHED) <= unmatched, f"now matching: {set(MISMATCHED) - unmatched}"
    assert len(groups) - len(unmatched) == 17


def test_bounded_groups_overshoot_at_p99(compared: pd.DataFrame) -> None:
    """The stated reason holds: every bounded group's p99 mismatch is the simulator above the
    log (never below), and the log's p99 is within 12% of its largest call (matched: 2.8x)."""
    calls, _ = read_call_logs([LOG])
    for (provider, model), reason in MISMATCHED.items():
        if not reason.startswith(BOUNDED):
            continue
        row = compared[
            (compared["provider"] == provider)
            & (compared["model"] == model)
            & (compared["quantile"] == "p99")
        ].iloc[0]
        assert not row["matches"]
        assert row["simulated_s"] > row["interval_hi_s"]
        mine = calls[(calls["provider"] == provider) & (calls["model"] == model)]["latency_s"]
        assert mine.max() < 1.12 * row["observed_s"]


def test_medians_match_within_5_percent_mostly(compared: pd.DataFrame) -> None:
    p50 = compared[compared["quantile"] == "p50"]
    assert p50["within_tolerance"].sum() >= 22
    assert p50["matches"].sum() >= 28


def test_order_interval_covers_the_quantile() -> None:
    """The distribution-free interval of a p95 from 95 draws covers the true p95 in about 95% of
    400 seeded samples (binomial SE 1.1 points; accept 90%-100%)."""
    rng = np.random.default_rng(8)
    truth = float(np.exp(1.6449))
    covered = 0
    for _ in range(400):
        low, high = order_interval(np.exp(rng.standard_normal(95)), 0.95)
        covered += low <= truth <= high
    assert 0.90 <= covered / 400 <= 1.0
