"""The breakdown of whole runs (`sim.run`) and the no-flattery rules: every failure and call
accounted for by reason and step, 429s named at the provider that sent them, a policy that fails
early never looks fast or cheap, and the API naming its own argument for an unknown policy."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from tests.helpers import build, serving, step


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


def test_the_api_names_its_own_argument_for_an_unknown_policy() -> None:
    with pytest.raises(ScenarioError) as info:
        sim.run(load_scenario(), requests=10, policies=["rase"])
    assert str(info.value).startswith("policies=")
    assert "'rase'" in str(info.value)
