"""A block fitted from a real trace (the bundled thefastest.ai log, MIT) drives a scenario whose
uncontended step latency is compared with the trace's p50 / p95 / p99, per provider and model
with at least 60 calls (29 groups of 60-95 calls; smaller ones have no p99 worth the name).

The issue's criterion is 5% at each of p50, p95 and p99: WITHIN_5 lists the groups that meet it,
and the test checks exactly those do. Every other group is listed with its reason. Most miss by
less than the log's own uncertainty: a percentile matches in the looser sense when the simulated
value is within 5% or inside the log percentile's 95% order-statistic interval (a p99 of 95 calls
is the 94th or 95th call, so that interval is often far wider than 5%); MISMATCHED lists the
groups that miss even that. Both lists are checked in both directions (they cannot go stale).
The check is in-sample (fitted and compared on the same calls). Seeds fixed: fit seed 0, replay
seed 1, 10,000 requests (Monte Carlo SE of a simulated p99 about 1-2%).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sim.calibration.check import order_interval, replay
from sim.calibration.log_readers import read_call_logs
from sim.calibration.report import GroupFit, fit_calls
from tests.helpers import REPO_ROOT

LOG = REPO_ROOT / "experiments/data/thefastest-ai/thefastest_ai_requests.csv"

#: p50, p95 and p99 all within 5% of the log's. The first is fitted with a ceiling (a lognormal
#: truncated at `max`, preferred by BIC): before `max` existed it overshot at p99.
#: gemini-1.5-pro left it when `auto` began keeping first token + generation wherever the log
#: does not refute it (issue 25, item 11): its p95 2.40 s against 2.60, inside the log's interval.
WITHIN_5 = {
    ("anthropic", "claude-3-sonnet-20240229"),
    ("cohere", "command-light"),
    ("google", "gemini-pro"),
    ("together.ai", "llama-2-13b-chat"),
}
#: Fitted with a ceiling (BIC prefers the truncated lognormal of total time).
CEILING = {
    ("anthropic", "claude-3-sonnet-20240229"),
    ("anthropic", "claude-instant-1.2"),
    ("together.ai", "llama-2-13b-chat"),
}
#: Replayed as they are: the parametric fit fails KS at 1%.
EMPIRICAL = {("cohere", "command-r-plus")}

#: A bounded tail: the log's p99 sits within a few % of its largest call (the calls stop at a
#: ceiling), but with 63-95 calls BIC does not prefer a truncated lognormal (log-likelihood gain
#: under ln(n)/2), so the fit has no ceiling and its p99 overshoots.
BOUNDED = "bounded tail, ceiling not supported by BIC: p99 overshoots"
MISMATCHED: dict[tuple[str, str], str] = {
    ("anthropic", "claude-3-haiku-20240307"): BOUNDED + " (and two region modes at p95)",
    ("azure.eastus2", "gpt-3.5-turbo"): BOUNDED,
    ("azure.eastus2", "gpt-4-1106-preview"): "multimodal (regions): the median misplaced by 7%",
    ("azure.westus", "gpt-3.5-turbo-1106"): BOUNDED,
    ("openai", "gpt-3.5-turbo-1106"): BOUNDED,
    ("perplexity.ai", "mixtral-8x7b-instruct"): BOUNDED,
    ("together.ai", "llama-2-70b-chat"): BOUNDED,
    ("together.ai", "llama-2-7b-chat"): BOUNDED,
}
#: The 17 others: some percentile (mostly p99, 5-21% off) misses 5% but lies inside the log
#: percentile's own 95% interval: the log does not pin it down to 5%, so neither can a fit.
#: The empirical group is among them: its law is the calls' step ECDF, whose p99 on 95 calls is
#: the largest call, while the log's p99 interpolates between the two largest.
WITHIN_INTERVAL = "some percentile > 5% off, inside the log's 95% interval"


@pytest.fixture(scope="module")
def fits() -> list[GroupFit]:
    calls, garbage = read_call_logs([LOG])
    assert garbage[str(LOG)].total == 0
    fitted, _ = fit_calls(calls, min_calls=60, seed=0)
    assert len(fitted) == 29
    return fitted


@pytest.fixture(scope="module")
def compared(fits: list[GroupFit]) -> pd.DataFrame:
    table = replay(fits, requests=10_000, seed=1)
    table["matches"] = table["within_tolerance"] | table["within_interval"]
    return table


@pytest.mark.slow
def test_fitted_blocks_reproduce_the_trace_percentiles(compared: pd.DataFrame) -> None:
    groups = compared.groupby(["provider", "model"])
    strict = {key for key, ok in groups["within_tolerance"].all().items() if ok}
    assert strict == WITHIN_5, f"new: {strict - WITHIN_5}, lost: {WITHIN_5 - strict}"
    unmatched = {key for key, ok in groups["matches"].all().items() if not ok}
    assert unmatched <= set(MISMATCHED), f"new mismatches: {unmatched - set(MISMATCHED)}"
    assert set(MISMATCHED) <= unmatched, f"now matching: {set(MISMATCHED) - unmatched}"
    assert len(groups) - len(unmatched) == 21
    assert len(groups) - len(unmatched) - len(strict) == 17  # WITHIN_INTERVAL


@pytest.mark.slow
def test_ceilings_and_empirical_fallbacks_where_stated(fits: list[GroupFit]) -> None:
    """The groups fitted with a ceiling, and the one replayed as it is, are those stated (so
    every BOUNDED group has no ceiling: BIC did not prefer one)."""
    modes = {(g.fit.provider, g.fit.model): g.fit.mode for g in fits}
    assert {key for key, mode in modes.items() if mode == "empirical"} == EMPIRICAL
    capped = {
        (g.fit.provider, g.fit.model) for g in fits if "max" in g.fit.serving_block()["ttft_s"]
    }
    assert capped == CEILING


@pytest.mark.slow
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


@pytest.mark.slow
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
