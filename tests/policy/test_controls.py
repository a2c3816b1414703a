"""Load-aware controls (sim.policy.controls): each control's law on its own, then in the engine on
scripted timelines (shedding counts a fast failure at the deadline and a success at its own
time), then the retry budget's bound over random failure rates (hypothesis)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model.config import AimdSpec, BreakerSpec, HedgeCapSpec, RetryBudgetSpec
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.policy.controls import Aimd, Breaker, HedgeCap, RetryBudget
from tests.helpers import (
    ScriptedBank,
    build,
    error,
    ok,
    scenario_dict,
    serving,
    simulate,
    step,
    timeline,
)


def test_retry_budget_follows_grpc_throttling() -> None:
    """gRPC's own retry_throttle_test: max 4 tokens (threshold 2), ratio 1.6, starting full."""
    budget = RetryBudget(RetryBudgetSpec(max_tokens=4, token_ratio=1.0))
    budget.ratio = 1.6  # gRPC's test value (above our config's cap of 1)
    budget.record(False)  # 3
    assert budget.allows()
    budget.record(True)  # 4, not beyond max
    assert budget.tokens == 4
    budget.record(False)  # 3
    assert budget.allows()
    budget.record(False)  # 2: at the threshold, no retries
    assert not budget.allows()
    budget.record(True)  # 3.6
    assert budget.allows()
    for _ in range(10):
        budget.record(False)
    assert budget.tokens == 0.0  # never below 0


def test_hedge_cap_is_a_share_of_primaries_over_a_sliding_window() -> None:
    cap = HedgeCap(HedgeCapSpec(max_extra=0.25, window_s=10))
    for t in range(8):
        cap.primary(float(t))
    assert cap.try_hedge(8.0)
    assert cap.try_hedge(8.0)
    assert not cap.try_hedge(8.0)  # 2 hedges = 25% of 8 primaries
    # at t = 15 the primaries of t <= 5 and both hedges (t = 8) are still... the hedges remain
    assert not cap.try_hedge(15.0)  # 2 primaries (6, 7) left: 25% of 2 < 1 + 2
    assert cap.try_hedge(19.0) is False  # primaries all expired
    for t in range(20, 24):
        cap.primary(float(t))
    assert cap.try_hedge(24.0)  # hedges of t = 8 expired; 1 <= 0.25 x 4


def test_breaker_opens_after_failures_in_its_window_and_closes_after_cooldown() -> None:
    breaker = Breaker(BreakerSpec(failures=3, window_s=10, cooldown_s=5))
    breaker.record(0.0, "error")
    breaker.record(1.0, "ok")
    breaker.record(2.0, "error")
    breaker.record(11.0, "error")  # the one at t = 0 left the window: 2 in it
    assert not breaker.is_open(11.0)
    breaker.record(11.5, "rate_limited")  # 3 within (1.5, 11.5]
    assert breaker.is_open(11.5)
    assert breaker.is_open(16.4)
    assert not breaker.is_open(16.5)
    assert breaker.open_seconds(13.5) == pytest.approx(2.0)
    assert breaker.open_seconds(100.0) == pytest.approx(5.0)
    breaker.record(13.0, "error")  # failures while open are not counted
    assert breaker.failures == type(breaker.failures)()


def test_breaker_ignores_outcomes_it_is_not_told_to_count() -> None:
    breaker = Breaker(BreakerSpec(failures=1, count=["rate_limited"]))
    breaker.record(0.0, "error")
    assert not breaker.is_open(0.0)
    breaker.record(1.0, "rate_limited")
    assert breaker.is_open(1.0)


def test_aimd_halves_on_429_grows_on_success_and_queues_beyond_the_limit() -> None:
    env = simpy.Environment()
    aimd = Aimd(env, AimdSpec(initial=4, min=1, max=8, increase=1.0, decrease_every_s=1.0))
    gates = [aimd.acquire() for _ in range(5)]
    assert gates[:4] == [None] * 4
    assert gates[4] is not None
    assert not gates[4].triggered
    aimd.record("rate_limited")
    assert aimd.limit == 2.0
    aimd.record("rate_limited")  # within decrease_every_s: once per second only
    assert aimd.limit == 2.0
    for _ in range(2):
        aimd.release()
    assert aimd.in_flight == 2
    assert not gates[4].triggered
    aimd.release()  # 1 in flight: the queued call goes
    assert gates[4].triggered
    assert aimd.in_flight == 2
    aimd.record("ok")
    assert aimd.limit == pytest.approx(2.5)  # + increase / limit


@pytest.mark.parametrize(
    ("controls", "where", "fragment"),
    [
        ({"hedge_cap": {"max_extra": 1.5}}, "controls.hedge_cap.max_extra", "1"),
        ({"retry_budget": {"token_ratio": 0}}, "controls.retry_budget.token_ratio", "0"),
        ({"aimd": {"initial": 500}}, "controls.aimd.initial", "between min"),
        ({"breaker": {"count": ["boom"]}}, "controls.breaker.count[0]", "rate_limited"),
        ({"stop_hedging_on_429_s": -1}, "controls.stop_hedging_on_429_s", "0"),
        ({"shed": {"margin": 0}}, "controls.shed.margin", "0"),
        ({"budget": {}}, "controls.budget", "retry_budget"),
    ],
)
def test_bad_controls_name_their_key_path(
    controls: dict[str, Any], where: str, fragment: str
) -> None:
    data = scenario_dict(policies={"w": {"kind": "wait", "retries": 1, "controls": controls}})
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    rendered = caught.value.render()
    assert f"policies.w.{where}" in rendered, rendered
    assert fragment in rendered, rendered


def test_schedule_arrivals_need_segments() -> None:
    data = scenario_dict(arrivals={"kind": "schedule", "rate_per_s": 1.0})
    with pytest.raises(ScenarioError, match=r"arrivals\.segments"):
        scenario_from_dict(data)


# --------------------------------------------------------------------------- in the engine


def test_breaker_refuses_attempts_without_calling_and_the_run_fails_fast() -> None:
    """Requests 0..2 fail (error at 1 s, no retries); three failures within 60 s open the
    breaker for 30 s: request 3 (t = 10) is refused at once, no call made; request 4 (t = 40)
    finds it closed again."""
    policies = {
        "w": {"kind": "wait", "controls": {"breaker": {"failures": 3, "cooldown_s": 30}}},
    }
    scenario = build(policies=policies)
    bank = ScriptedBank(lambda s, a, i: error() if i < 3 else ok(), n_requests=5)
    result = simulate(scenario, "w", bank, arrivals=[0.0, 0.5, 1.0, 10.0, 40.0])
    req = result.requests.set_index("request_id")
    assert list(req["fail_reason"]) == ["error", "error", "error", "breaker_open", ""]
    assert req.loc[3, "end_s"] == 10.0
    assert req.loc[3, "calls"] == 0
    assert len(result.calls) == 4
    assert result.records.breaker_open_s == pytest.approx(30.0)


def test_retry_budget_stops_retries_once_spent() -> None:
    """max_tokens 4 (threshold 2), every call fails: the first failure leaves 3 (retry), the
    retry's leaves 2 (no more); the later requests' first failures find it at the threshold."""
    policies = {
        "w": {
            "kind": "wait",
            "retries": 5,
            "controls": {"retry_budget": {"max_tokens": 4, "token_ratio": 0.5}},
        }
    }
    scenario = build(policies=policies)
    bank = ScriptedBank(lambda s, a, i: error(), n_requests=3)
    result = simulate(scenario, "w", bank, arrivals=[0.0, 50.0, 60.0])
    assert list(result.calls.groupby("request_id").size()) == [2, 1, 1]


def test_hedge_cap_and_429_pause_drop_race_extras() -> None:
    """A race of 2 under a zero hedge cap sends only its first attempt."""
    policies = {
        "r": {"kind": "race", "attempts": 2, "controls": {"hedge_cap": {"max_extra": 0.0}}},
        "plain": {"kind": "race", "attempts": 2},
    }
    scenario = build(policies=policies)
    capped = simulate(scenario, "r", arrivals=[0.0, 10.0])
    plain = simulate(scenario, "plain", arrivals=[0.0, 10.0])
    assert len(capped.calls) == 2
    assert len(plain.calls) == 4
    assert capped.requests["ok"].all()


def test_stop_hedging_after_a_429() -> None:
    """A tight RPM quota: request 0's race takes the only request a minute allows and its extra
    gets a 429; request 1 (t = 1) races no extra to the provider that just sent a 429."""
    provider = {"rpm": 1, "serves": {"big": serving(), "small": serving()}}
    policies = {
        "r": {"kind": "race", "attempts": 2, "controls": {"stop_hedging_on_429_s": 30}},
        "blind": {"kind": "race", "attempts": 2},
    }
    scenario = build(policies=policies, providers={"p1": provider, "p2": provider})
    polite = simulate(scenario, "r", arrivals=[0.0, 1.0])
    blind = simulate(scenario, "blind", arrivals=[0.0, 1.0])
    assert list(polite.calls.groupby("request_id").size()) == [2, 1]
    assert list(blind.calls.groupby("request_id").size()) == [2, 2]


def test_aimd_queues_calls_at_the_client_and_the_deadline_cancels_the_wait() -> None:
    """Limit 1: two requests at t = 0 (2 s calls): the second waits at the client and starts at
    2 s. With a 1 s deadline the second run is cancelled while it waits: no call at all."""
    policies = {"w": {"kind": "wait", "controls": {"aimd": {"initial": 1, "min": 1, "max": 1}}}}
    scenario = build(policies=policies)
    result = simulate(scenario, "w", arrivals=[0.0, 0.0])
    assert sorted(result.calls["start_s"]) == [0.0, 2.0]
    short = build(policies=policies, deadline_s=2.5)
    late = simulate(short, "w", arrivals=[0.0, 0.0])
    assert len(late.calls) == 2
    assert late.calls["outcome"].tolist() == ["ok", "cancelled"]
    tight = build(policies=policies, deadline_s=1.5)
    gone = simulate(tight, "w", arrivals=[0.0, 0.0])
    assert len(gone.calls) == 1  # the waiting one never called


def test_shedding_rejects_runs_expected_past_the_deadline_and_probes_again() -> None:
    """Every call takes 2 s, the deadline is 1.5 s: the first 5 runs miss (each counts at the
    deadline); with 5 step times in the 30 s window every later arrival is shed until they leave
    the window, then one more is admitted."""
    policies = {"w": {"kind": "wait", "controls": {"shed": {"window_s": 30, "min_samples": 5}}}}
    scenario = build(policies=policies, deadline_s=1.5)
    arrivals = [0.0, 1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 40.0]
    result = simulate(scenario, "w", arrivals=arrivals)
    reasons = result.requests.sort_values("request_id")["fail_reason"].tolist()
    assert reasons == ["deadline"] * 5 + ["shed", "shed", "deadline"]


def test_controls_off_change_nothing() -> None:
    """A policy with `controls: {}` gives the same tables as without the key."""
    steps = [step("s1"), step("s2", "s1")]
    policies = {"a": {"kind": "cut", "cutoff": 1.5, "retries": 2}}
    with_key = {"a": {**policies["a"], "controls": {}}}
    arrivals = np.linspace(0, 20, 30).tolist()
    cut = {"s1": 1.5, "s2": 1.5}
    one = simulate(build(steps, policies), "a", arrivals=arrivals, thresholds=cut)
    two = simulate(build(steps, with_key), "a", arrivals=arrivals, thresholds=cut)
    assert one.calls.equals(two.calls)
    assert one.requests.equals(two.requests)


# --------------------------------------------------------------------------- the budget's bound


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    error_rate=st.floats(0.0, 0.95),
    max_tokens=st.sampled_from([2.0, 6.0, 10.0]),
    ratio=st.sampled_from([0.05, 0.1, 0.5]),
    seed=st.integers(0, 50),
)
def test_retry_budget_bounds_amplification(
    error_rate: float, max_tokens: float, ratio: float, seed: int
) -> None:
    """Whatever the failure rate, policy retries stay below max_tokens / 2 + token_ratio x
    successful attempts (gRPC throttling: each granted retry follows its own failure's
    decrement while the count is above max_tokens / 2, and only successes add)."""
    serve = serving(error_rate=error_rate)
    policies = {
        "w": {
            "kind": "wait",
            "retries": 4,
            "controls": {"retry_budget": {"max_tokens": max_tokens, "token_ratio": ratio}},
        }
    }
    scenario = build(
        policies=policies, providers={"p1": {"serves": {"big": serve, "small": serve}}}
    )
    arrivals = np.arange(200) * 0.5
    calls = simulate(scenario, "w", arrivals=arrivals.tolist(), seed=seed).calls
    retries = int((calls["attempt"] > 0).sum())
    successes = int((calls["outcome"] == "ok").sum())
    assert retries < max_tokens / 2 + ratio * successes
    if error_rate > 0.5:  # and the bound is what binds, not the retries allowed
        assert retries < 4 * int((calls["outcome"] == "error").sum())


# ----------------------------------------------------------------------------- shedding

#: Shedding on 3 step times within 30 s; the deadline 10 s.
SHED = {"kind": "wait", "controls": {"shed": {"window_s": 30, "min_samples": 3}}}


def test_shedding_counts_a_fast_failure_at_the_deadline() -> None:
    """Bug: a failed step counted at its own time (0.1 s) instead of at the deadline. Every
    call fails with an error after 0.1 s; three failures count 10 s each, so the expected time
    of the next run is 10 s, not below the 10 s deadline: runs 3 and 4 are shed. With the bug
    the expected time is 0.1 s and nothing is ever shed."""
    scenario = build(policies={"w": SHED}, deadline_s=10.0)
    bank = ScriptedBank({}, n_requests=5, default=error(0.1))
    result = simulate(scenario, "w", bank, [0.0, 1.0, 2.0, 3.0, 4.0])
    reasons = result.requests.sort_values("request_id")["fail_reason"].tolist()
    assert reasons == ["error"] * 3 + ["shed"] * 2
    assert timeline(result.calls)[-1][4] == 2.0  # the shed runs made no call


def test_shedding_counts_a_success_at_its_own_time() -> None:
    """The other side: answered steps count their own 2 s, below the 3 s deadline, so nothing
    is shed (a shedder counting every step at the deadline would shed runs 3 and 4)."""
    scenario = build(policies={"w": SHED}, deadline_s=3.0)
    result = simulate(scenario, "w", ScriptedBank({}, 5, ok()), [0.0, 1.0, 2.0, 3.0, 4.0])
    assert result.requests["ok"].all()
