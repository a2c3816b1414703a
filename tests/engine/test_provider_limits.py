"""Providers as they really behave, in the engine on scripted and constant calls: SDK retries
multiply calls and are counted apart, a race and customers back off, max_tokens is reserved
against a per-model quota, bad provider values name their key path, and difficulty slows every
attempt of a request alike. The quota laws themselves are in tests/model/test_ratelimit.py, the
backoff in tests/model/test_backoff.py, the whole-run checks (quota windows on calls.parquet,
steady start, load slowdown, hedging under bad spells) in
tests/integration/test_provider_limits.py."""

from __future__ import annotations

import pytest

import sim
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from tests.helpers import ScriptedBank, error, scenario_dict, serving, simulate, step


def test_sdk_retries_multiply_calls_and_are_counted_apart() -> None:
    """retries: 2 under sdk.retries: 2: up to 3 x 3 = 9 calls for one step, 6 of them SDK's."""
    data = scenario_dict(
        [step("s1")],
        {"wait": {"kind": "wait", "retries": 2, "backoff": {"base_s": 1, "jitter": "none"}}},
        providers={
            "p1": {
                "serves": {"big": serving()},
                "sdk": {"retries": 2, "backoff": {"base_s": 0.5, "jitter": "none"}},
            }
        },
    )
    scenario = scenario_from_dict(data)
    result = simulate(scenario, "wait", ScriptedBank({}, default=error()))
    calls = result.calls
    assert len(calls) == 9
    assert list(calls["sdk_retry"]) == [0, 1, 2] * 3
    assert list(calls["attempt"]) == [0] * 3 + [1] * 3 + [2] * 3
    # each call errors at 1 s; the SDK waits 0.5 then 1.0, the policy 1, 2
    assert list(calls["start_s"]) == pytest.approx([0, 1.5, 3.5, 5.5, 7, 9, 12, 13.5, 15.5])
    summary = sim.analysis.metrics.summarize(result.requests, calls)
    assert summary["sdk_retries_per_request"].iloc[0] == 6
    assert summary["calls_per_request"].iloc[0] == 9
    assert summary["extra_attempts_per_request"].iloc[0] == 8


def test_race_and_customers_back_off() -> None:
    data = scenario_dict(
        [step("s1")],
        {"race": {"kind": "race", "retries": 1, "backoff": {"base_s": 3, "jitter": "none"}}},
        customers={
            "retry": {"probability": 1.0, "max": 1, "backoff": {"base_s": 7, "jitter": "none"}}
        },
    )
    result = simulate(scenario_from_dict(data), "race", ScriptedBank({}, default=error()))
    starts = sorted(result.calls["start_s"].round(9).unique())
    # round 1 at 0 (fails at 1), round 2 after 3 s; the run fails at 5; re-sent 7 s later
    assert starts == [0.0, 4.0, 12.0, 16.0]


# ----------------------------------------------------------------------------- quotas


def test_max_tokens_reserved_and_per_model_quota() -> None:
    data = scenario_dict(
        [step("s1", max_tokens=400)],
        {"wait": {"kind": "wait"}},
        providers={
            "p1": {"charge": "max_tokens", "serves": {"big": {**serving(), "tpm": 2800}}},
        },
    )
    scenario = scenario_from_dict(data)
    result = simulate(scenario, "wait", arrivals=[0.0, 0.0, 0.0])
    calls = result.calls
    assert list(calls["quota_tokens"]) == [1400, 1400, 0]  # input + max_tokens, exactly
    assert list(calls["outcome"]) == ["ok", "ok", "rate_limited"]
    assert list(calls["output_tokens"]) == [100, 100, 0]  # billed: what was generated


def test_bad_values_name_their_key_path() -> None:
    bad = [
        ({"window": "hour"}, "providers.p1.window"),
        ({"episodes": {"every_s": 10, "last_s": 20}}, "providers.p1.episodes.last_s"),
        ({"sdk": {"backoff": {"base_s": 5, "max_s": 1}}}, "providers.p1.sdk.backoff.max_s"),
        ({"serves": {"big": {**serving(), "tpm": 10}}}, "providers.p1.serves.big.tpm"),
    ]
    for provider, path in bad:
        data = scenario_dict(providers={"p1": {"serves": {"big": serving()}, **provider}})
        with pytest.raises(ScenarioError, match=path.replace(".", r"\.")):
            scenario_from_dict(data)
    data = scenario_dict([step("s1", max_tokens=0)])  # a cap below one token admits nothing
    with pytest.raises(ScenarioError, match=r"workflow\.steps\[0\]\.max_tokens"):
        scenario_from_dict(data)


def test_difficulty_slows_every_attempt_of_a_request_alike() -> None:
    data = scenario_dict(
        [step("s1"), step("s2", "s1")],
        {"wait": {"kind": "wait"}},
        difficulty={"median": 1.0, "p99": 4.0},
    )
    scenario = scenario_from_dict(data)
    result = simulate(scenario, "wait", arrivals=[0.0, 100.0, 200.0])
    calls = result.calls
    ttft = calls.pivot(index="request_id", columns="step", values="ttft_s")
    assert (ttft["s1"] == ttft["s2"]).all()  # constant law x the request's factor
    assert ttft["s1"].nunique() == 3  # requests differ
