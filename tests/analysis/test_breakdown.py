"""sim.analysis.breakdown and the no-flattery rules: failures by reason and step, load per provider,
and a policy that fails early never looks fast or cheap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sim
from sim.analysis.breakdown import ProviderLimits, breakdown, provider_limits
from sim.analysis.capacity import NONE, check_fits, estimated_bytes
from sim.analysis.metrics import peak_window_sum
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from tests.helpers import build, serving, step


def _brute_peak(times: list[float], amounts: list[float], window: float) -> float:
    """The peak over windows (t - window, t] ending at every event, by brute force."""
    return max(
        (sum(a for s, a in zip(times, amounts, strict=True) if t - window < s <= t) for t in times),
        default=0.0,
    )


@given(
    st.lists(
        st.tuples(st.integers(0, 600), st.integers(0, 5000)), min_size=0, max_size=40
    )  # integer seconds make window edges exact
)
def test_peak_window_sum_is_the_brute_force_peak(events: list[tuple[int, int]]) -> None:
    times = [float(t) for t, _ in events]
    amounts = [float(a) for _, a in events]
    got = peak_window_sum(np.array(times), np.array(amounts), 60.0)
    assert got == pytest.approx(_brute_peak(times, amounts, 60.0))


def test_breakdown_accounts_for_every_failure_and_call() -> None:
    """On the default scenario: failure shares add up to the miss rate, provider rows to every
    call, and busy slots follow from the calls' holding times."""
    scenario = load_scenario()
    result = sim.run(scenario, requests=400, policies=["wait", "race"])
    table = result.breakdown
    for policy in ("wait", "race"):
        mine = table[table["policy"] == policy]
        runs = result.requests[result.requests["policy"] == policy]
        failures = mine[mine["section"] == "failure"]
        assert failures["runs"].sum() == (~runs["ok"]).sum()
        assert failures["share_of_runs"].sum() == pytest.approx(1 - runs["ok"].mean())
        providers = mine[mine["section"] == "provider"].set_index("provider")
        calls = result.calls[result.calls["policy"] == policy]
        assert providers["calls"].sum() == len(calls)
        assert list(providers.index) == list(scenario.providers)
        assert (providers["busy_share"] <= 1).all()
        assert (providers["peak_tpm_share"] > 0).any()
    race = table[(table["policy"] == "race") & (table["section"] == "provider")]
    assert (race["calls"] > 0).all()  # race spreads its attempts over both providers


def test_breakdown_names_429s_at_the_provider_that_sent_them() -> None:
    """A quota of two calls a minute: the 429s are counted at that provider, and the failures
    they cause are named rate_limited at the step that met them."""
    scenario = build(
        [step("s1")],
        {"wait": {"kind": "wait"}},
        providers={
            "p1": {"tpm": 2200, "serves": {"big": serving(), "small": serving()}},
            "p2": {"serves": {"big": serving(), "small": serving()}},
        },
        arrivals={"kind": "poisson", "rate_per_s": 1.0},
    )
    result = sim.run(scenario, requests=60)
    table = result.breakdown
    p1 = table[(table["section"] == "provider") & (table["provider"] == "p1")].iloc[0]
    assert p1["rate_limited"] > 30
    assert p1["peak_tpm_share"] <= 2.0  # a full bucket plus one minute of refill at most
    failures = table[table["section"] == "failure"]
    assert failures.iloc[0]["fail_reason"] == "rate_limited"
    assert failures.iloc[0]["fail_step"] == "s1"


def test_a_policy_failing_early_is_neither_fast_nor_cheap() -> None:
    """A cut at 0.5 s on 1.1 s calls fails every run within a second: its p50 must be the
    deadline (it delivered nothing), and its cost per success is undefined, not low."""
    scenario = build(
        [step("s1"), step("s2", "s1")],
        {"wait": {"kind": "wait"}, "hasty": {"kind": "cut", "cutoff": 0.5, "retries": 0}},
        deadline_s=30.0,
    )
    result = sim.run(scenario, requests=200)
    summary = result.summary.set_index("policy")
    assert summary.loc["hasty", "hit_rate"] == 0.0
    assert summary.loc["hasty", "p50_s"] == 30.0
    assert summary.loc["hasty", "mean_s"] == 30.0
    assert np.isnan(summary.loc["hasty", "cost_per_success_usd"])
    assert summary.loc["wait", "p50_s"] < 30.0
    hasty = result.requests[result.requests["policy"] == "hasty"]
    assert ((hasty["end_s"] - hasty["arrival_s"]) < 1.0).all()  # it did fail early
    assert set(hasty["fail_reason"]) == {"timeout"}


def test_provider_limits_from_specs_and_dumped_dicts() -> None:
    scenario = load_scenario()
    from_specs = provider_limits(scenario.providers)
    from_dicts = provider_limits(scenario.model_dump()["providers"])
    assert (
        from_specs
        == from_dicts
        == {
            "direct": ProviderLimits(512, 20_000_000),
            "managed": ProviderLimits(256, 10_000_000),
        }
    )


def test_breakdown_of_a_policy_without_failures_has_provider_rows_only() -> None:
    requests = pd.DataFrame(
        {
            "policy": ["p"],
            "request_id": [0],
            "resend": [0],
            "arrival_s": [0.0],
            "latency_s": [2.0],
            "ok": [True],
            "end_s": [2.0],
            "fail_reason": [""],
            "fail_step": [""],
        }
    )
    calls = pd.DataFrame(
        {
            "policy": ["p"],
            "provider": ["a"],
            "start_s": [0.0],
            "queue_s": [0.5],
            "end_s": [2.0],
            "outcome": ["ok"],
            "quota_tokens": [100],
        }
    )
    table = breakdown(requests, calls, {"a": ProviderLimits(3, 1000)})
    assert list(table["section"]) == ["provider"]
    row = table.iloc[0]
    assert row["busy_slots_mean"] == pytest.approx(1.5 / 2.0)  # held 1.5 s of a 2 s span
    assert row["busy_share"] == pytest.approx(0.75 / 3)
    assert row["peak_tpm_share"] == pytest.approx(0.1)


def test_capacity_check_refuses_what_cannot_fit_and_names_the_way_out() -> None:
    scenario = load_scenario()
    need = estimated_bytes(scenario, 1000, ["wait", "race"])
    check_fits(scenario, 1000, ["wait", "race"], available=need * 2)
    with pytest.raises(ScenarioError) as info:
        check_fits(scenario, 1000, ["wait", "race"], available=need // 2)
    message = str(info.value)
    assert "GiB" in message
    assert "--policy" in message
    assert estimated_bytes(scenario, 1000, ["race"]) > estimated_bytes(scenario, 1000, ["wait"])


def test_summaries_only_is_advised_only_where_it_would_fit() -> None:
    scenario = load_scenario()
    none = estimated_bytes(scenario, 10**9, ["wait"], NONE)
    assert estimated_bytes(scenario, 10**9, ["wait"]) > none * 10
    with pytest.raises(ScenarioError) as info:
        check_fits(scenario, 10**9, ["wait"], available=none * 2)
    assert "or --records none (summaries only)" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        check_fits(scenario, 10**9, ["wait"], available=none // 2)
    assert "--records none" not in str(info.value)
    assert "for their records" in str(info.value)
    with pytest.raises(ScenarioError) as info:
        check_fits(scenario, 10**9, ["wait"], available=none // 2, records=NONE)
    assert "even with summaries only" in str(info.value)


def test_the_api_names_its_own_argument_for_an_unknown_policy() -> None:
    with pytest.raises(ScenarioError) as info:
        sim.run(load_scenario(), requests=10, policies=["rase"])
    assert str(info.value).startswith("policies=")
    assert "'rase'" in str(info.value)
