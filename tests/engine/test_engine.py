"""sim.engine.simulation on tiny scenarios: requests, deadlines, cancellation, records, optional
steps, customer re-sends and their draws, and one draw bank shared by every policy. The contract
run through `sim.run` is in tests/integration/test_engine.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from sim.analysis.metrics import summarize
from sim.engine.simulation import Simulation
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from sim.policy.build import build_policy
from tests.helpers import (
    BIG_IN,
    BIG_OUT,
    Draw,
    ScriptedBank,
    build,
    const,
    error,
    ok,
    serving,
    simulate,
    step,
    timeline,
)


def test_common_random_numbers_with_constant_queue_free_settings() -> None:
    """With constant first token and lognormal speed, s1's first call lasts the same under wait
    and cut whenever cut does not cut it."""
    providers = {
        "p1": {
            "serves": {
                "big": {
                    "ttft_s": {"dist": "constant", "value": 0.5},
                    "tokens_per_s": {"median": 50, "p99": 150},
                    "error_rate": 0.05,
                }
            }
        }
    }
    policies = {"wait": {"kind": "wait", "retries": 1}, "cut": {"kind": "cut", "cutoff": 2.5}}
    scenario = build([step("s1"), step("s2", "s1")], policies, providers=providers)
    arrivals = list(np.arange(200) * 100.0)
    wait = simulate(scenario, "wait", arrivals=arrivals, seed=9).calls
    cut = simulate(scenario, "cut", arrivals=arrivals, thresholds={"s1": 2.5, "s2": 2.5}, seed=9)
    key = ["request_id", "step", "attempt"]
    both = wait.merge(cut.calls, on=key, suffixes=("_w", "_c"))
    uncut = both[both["outcome_c"] != "timeout"]
    assert len(uncut) > 100
    assert (cut.calls["outcome"] == "timeout").sum() > 10  # the comparison is not vacuous
    np.testing.assert_array_equal(
        uncut["end_s_w"] - uncut["start_s_w"], uncut["end_s_c"] - uncut["start_s_c"]
    )
    assert (uncut["outcome_w"] == uncut["outcome_c"]).all()


# ----------------------------------------------------------------------------- required / optional


def test_failed_optional_step_does_not_fail_the_request() -> None:
    scenario = build([step("a"), step("b", required=False)])
    bank = ScriptedBank({("a", 0): ok(1.0, 2.0), ("b", 0): error(1.0)})
    result = simulate(scenario, "wait", bank)
    request = result.requests.iloc[0]
    assert bool(request.ok)
    assert request.latency_s == 3.0


def test_failed_optional_step_drops_its_optional_downstream() -> None:
    scenario = build([step("a"), step("b", required=False), step("c", "b", required=False)])
    bank = ScriptedBank({("a", 0): ok(1.0, 2.0), ("b", 0): error(1.0)})
    result = simulate(scenario, "wait", bank)
    assert set(result.calls["step"]) == {"a", "b"}  # c never runs
    assert bool(result.requests.iloc[0].ok)
    assert result.requests.iloc[0].latency_s == 3.0


def test_failed_optional_step_with_a_required_downstream_fails_the_request() -> None:
    scenario = build([step("a"), step("b", required=False), step("c", "b")])
    bank = ScriptedBank({("a", 0): ok(1.0, 9.0), ("b", 0): error(1.0)})
    result = simulate(scenario, "wait", bank)
    request = result.requests.iloc[0]
    assert not bool(request.ok)
    assert request.end_s - request.arrival_s == 1.0  # known lost at once, not at the deadline
    assert request.latency_s == scenario.deadline_s  # but it delivered nothing
    assert (request.fail_reason, request.fail_step) == ("error", "b")


def test_two_failed_optional_branches_sharing_an_optional_join() -> None:
    """a -> b?, c? -> d?: b and c both fail; only optional work is lost, the request succeeds
    when they fail. (d is downstream of both failures and must be written off once.)"""
    steps = [
        step("a"),
        step("b", "a", required=False),
        step("c", "a", required=False),
        step("d", "b", "c", required=False),
    ]
    bank = ScriptedBank({("a", 0): ok(1.0, 1.0), ("b", 0): error(1.0), ("c", 0): error(2.0)})
    result = simulate(build(steps), "wait", bank)
    assert set(result.calls["step"]) == {"a", "b", "c"}
    request = result.requests.iloc[0]
    assert bool(request.ok), f"request failed at latency {request.latency_s} (deadline 100)"
    assert request.latency_s == 4.0


def test_required_failure_ends_early_and_cancels_parallel_calls() -> None:
    scenario = build([step("a"), step("b"), step("c", "a", "b")])
    bank = ScriptedBank({("a", 0): error(1.5), ("b", 0): ok(1.0, 20.0)})
    result = simulate(scenario, "wait", bank, arrivals=[10.0])
    assert timeline(result.calls) == [
        ("a", 0, "p1", "big", 10.0, 11.5, "error"),
        ("b", 0, "p1", "big", 10.0, 11.5, "cancelled"),
    ]
    request = result.requests.iloc[0]
    assert (bool(request.ok), request.end_s - request.arrival_s) == (False, 1.5)
    assert result.records.runs[0].active == set()


# ----------------------------------------------------------------------------- deadline


@pytest.mark.parametrize("policy", ["wait", "hedge", "race"])
def test_deadline_cancels_in_flight_calls_at_the_deadline(policy: str) -> None:
    policies = {
        "wait": {"kind": "wait", "retries": 3},
        "hedge": {"kind": "hedge", "after": 10.0, "providers": ["p2"]},
        "race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"], "retries": 2},
    }
    scenario = build([step("s1"), step("s2", "s1")], policies, deadline_s=30.0)
    slow = Draw(ttft=1.0, generation=100.0)
    result = simulate(
        scenario, policy, ScriptedBank({}, default=slow), arrivals=[5.0], thresholds={"s1": 10.0}
    )
    calls = result.calls
    assert (calls["end_s"] == 35.0).all()
    assert (calls["outcome"] == "cancelled").all()
    assert (calls["start_s"] < 35.0).all()
    assert set(calls["step"]) == {"s1"}
    assert len(calls) == (1 if policy == "wait" else 2)
    # 'full' billing: a call cancelled once served is billed its whole answer
    np.testing.assert_allclose(calls["cost_usd"], 1000 * BIG_IN + 100 * BIG_OUT)
    request = result.requests.iloc[0]
    assert (bool(request.ok), request.latency_s) == (False, 30.0)
    assert request.cost_usd == pytest.approx(calls["cost_usd"].sum())


def test_no_retry_starts_after_the_deadline() -> None:
    scenario = build([step("s1")], {"cut": {"kind": "cut", "cutoff": 4.0, "retries": 50}})
    scenario = scenario.model_copy(update={"deadline_s": 10.0})
    result = simulate(
        scenario, "cut", ScriptedBank({}, default=Draw(1.0, 9.0)), thresholds={"s1": 4.0}
    )
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 4.0, "timeout"),
        ("s1", 1, "p1", "big", 4.0, 8.0, "timeout"),
        ("s1", 2, "p1", "big", 8.0, 10.0, "cancelled"),
    ]


def test_deadline_cancel_billing_none_costs_nothing() -> None:
    scenario = build([step("s1")], deadline_s=5.0, billing={"cancelled": "none"})
    result = simulate(scenario, "wait", ScriptedBank({}, default=Draw(1.0, 50.0)))
    call = result.calls.iloc[0]
    assert (call.outcome, call.end_s, call.cost_usd) == ("cancelled", 5.0, 0.0)


# ----------------------------------------------------------------------------- customers


def test_customer_resends_add_runs() -> None:
    scenario = build(
        [step("s1")], customers={"retry": {"probability": 1.0, "max": 2, "delay_s": 5.0}}
    )
    result = simulate(scenario, "wait", ScriptedBank({("s1", 0): error(1.0)}), arrivals=[2.0])
    runs = result.requests
    assert runs["resend"].tolist() == [0, 1, 2]
    assert runs["arrival_s"].tolist() == [2.0, 8.0, 14.0]  # each 5 s after the last failure
    assert not runs["ok"].any()
    assert result.calls["resend"].tolist() == [0, 1, 2]
    summary = summarize(result.requests, result.calls).iloc[0]
    assert (summary["requests"], summary["runs"]) == (1, 3)
    assert summary["retry_amplification"] == 3.0


def test_customer_resends_stop_after_a_success() -> None:
    scenario = build(
        [step("s1")], customers={"retry": {"probability": 1.0, "max": 5, "delay_s": 1.0}}
    )

    def script(step_id: str, attempt: int, index: int) -> Draw:
        return ok() if index == 1 else error()

    bank = ScriptedBank(script, n_requests=2)
    result = simulate(scenario, "wait", bank, arrivals=[0.0, 0.5])
    per_request = result.requests.groupby("request_id")["resend"].max()
    assert per_request.to_dict() == {0: 5, 1: 0}


def test_customer_resend_probability() -> None:
    n, p = 400, 0.5
    scenario = build(
        [step("s1")], customers={"retry": {"probability": p, "max": 2, "delay_s": 1.0}}
    )
    bank = ScriptedBank({}, n_requests=n, default=error())
    result = simulate(scenario, "wait", bank, arrivals=list(np.arange(n) * 10.0), seed=4)
    amplification = len(result.requests) / n
    # runs per request = 1 + B1 + B1 B2 with B ~ Bernoulli(1/2): mean 1.75, variance 0.6875;
    # SE of the mean over n requests = sqrt(0.6875 / n); allow 4 SE
    assert abs(amplification - 1.75) < 4 * math.sqrt(0.6875 / n)
    assert result.requests["resend"].max() == 2


def test_resend_draws_are_common_to_policies() -> None:
    policies = {"wait": {"kind": "wait"}, "cut": {"kind": "cut", "cutoff": 50.0}}
    scenario = build(
        [step("s1")], policies, customers={"retry": {"probability": 0.5, "max": 1, "delay_s": 1}}
    )
    n = 60
    arrivals = list(np.arange(n) * 10.0)
    resent = []
    for policy in policies:
        bank = ScriptedBank({}, n_requests=n, default=error())
        res = simulate(scenario, policy, bank, arrivals, thresholds={"s1": 50.0}, seed=1)
        resent.append(set(res.requests.loc[res.requests["resend"] == 1, "request_id"]))
    assert resent[0] == resent[1]
    assert 0 < len(resent[0]) < n


def test_frames_match_records() -> None:
    scenario = build([step("a"), step("b", "a")])
    result = simulate(scenario, "wait", ScriptedBank({("a", 0): error()}), arrivals=[1.0])
    (run,) = result.records.runs
    assert (run.index, run.resend, run.calls, run.ok) == (0, 0, 1, False)
    row = result.requests.iloc[0]
    assert run.end - run.arrival == row.end_s - row.arrival_s == 1.0
    assert list(result.calls.columns)[:5] == ["policy", "request_id", "resend", "step", "attempt"]
    assert result.calls.iloc[0].policy == "wait"


def test_request_failing_with_a_queued_call_does_not_jam_the_provider() -> None:
    """A call still queued when its request fails is dropped: it costs nothing and must never
    take a slot later. Request 0 holds p1's only slot until 20.5; request 1's b queues behind it
    and is cancelled when its a fails at 1.5; request 2 (at 30) must find p1 free."""
    providers = {
        "p1": {"concurrency": 1, "serves": {"big": serving()}},
        "p2": {"serves": {"big": serving()}},
    }
    scenario = build([step("a", provider="p2"), step("b")], providers=providers)

    def script(step_id: str, attempt: int, index: int) -> Draw:
        if step_id == "a":
            return error(0.5) if index == 1 else ok(0.25, 0.25)
        return ok(1.0, 19.5) if index == 0 else ok(0.5, 0.5)

    bank = ScriptedBank(script, n_requests=3)
    result = simulate(scenario, "wait", bank, arrivals=[0.0, 1.0, 30.0])
    calls = result.calls.set_index(["request_id", "step"])
    dropped = calls.loc[(1, "b")]
    assert (dropped.outcome, dropped.end_s, dropped.queue_s) == ("cancelled", 1.5, 0.5)
    assert dropped.cost_usd == 0.0
    late = calls.loc[(2, "b")]
    assert late.queue_s == 0.0, f"request 2 queued {late.queue_s} s behind a dropped call"
    assert result.requests["ok"].tolist() == [True, False, True]


# ----------------------------------------------------------------------------- re-sends


def _resend_scenario(n: int) -> tuple[Any, CallDrawBank]:
    """One step with a random first token (exponential, mean 1 s) and half the answers junk;
    every failed request is re-sent once, 1 s later. Returns the scenario and a bank."""
    providers = {
        "p1": {
            "serves": {
                "big": {
                    "ttft_s": {"dist": "exponential", "mean": 1.0},
                    "tokens_per_s": const(100.0),
                    "invalid_rate": 0.5,
                }
            }
        }
    }
    scenario = build(
        [step("s1")],
        {"wait": {"kind": "wait"}},
        providers=providers,
        customers={"retry": {"probability": 1.0, "max": 1, "delay_s": 1.0}},
    )
    return scenario, CallDrawBank(Streams(11, "main").child("calls"), n)


def test_every_call_uses_the_draws_of_its_own_resend() -> None:
    """Mutation: `_call` passes resend 0 to the draw bank. Every call's first token (set for
    answers and junk alike) must be the bank's row for its own (step, attempt, resend)."""
    n = 200
    scenario, bank = _resend_scenario(n)
    result = simulate(scenario, "wait", bank, list(np.arange(n) * 10.0))
    latency = compile_scenario(scenario).latencies[("p1", "big")]
    calls = result.calls
    assert set(calls["resend"]) == {0, 1}
    for resend, group in calls.groupby("resend"):
        rows = bank.draws("s1", 0, int(resend), ("p1", "big"), latency, 100).ttft
        expected = [rows[i] for i in group["request_id"]]
        np.testing.assert_array_equal(group["ttft_s"].to_numpy(float), expected)


def test_a_resend_fails_again_only_at_the_failure_rate() -> None:
    """Mutation: `_call` passes resend 0 to the draw bank, so a re-send replays its first
    send's draws and a junk answer is junk again. With junk rate 0.5, the re-sends of failed
    requests succeed at 0.5: binomial SE sqrt(0.25 / m) over m ~ 100 re-sends, 4 SE allowed
    (the mutation gives 0, ~10 SE away)."""
    n = 200
    scenario, bank = _resend_scenario(n)
    result = simulate(scenario, "wait", bank, list(np.arange(n) * 10.0))
    resent = result.requests[result.requests["resend"] == 1]
    m = len(resent)
    assert 60 < m < 140  # about half of 200 first sends failed
    assert abs(float(resent["ok"].mean()) - 0.5) <= 4 * math.sqrt(0.25 / m)


# ----------------------------------------------------------------------------- shared draw bank


def random_first_token_scenario() -> Any:
    """Two steps on p1 with a random first token, no failures, and two policies that never cut
    a call here (every call ends normally, so each records its first token)."""
    providers = {
        "p1": {
            "serves": {
                "big": {
                    "ttft_s": {"dist": "exponential", "mean": 1.0},
                    "tokens_per_s": const(100.0),
                }
            }
        }
    }
    policies = {"wait": {"kind": "wait"}, "cut": {"kind": "cut", "cutoff": 1000.0}}
    return build([step("s1"), step("s2", "s1")], policies, providers=providers)


def test_two_simulations_sharing_a_bank_see_the_same_rows() -> None:
    """Mutation: each Simulation draws from a bank of its own (another stream). Two policies
    simulated on one CallDrawBank give every request the same first token per (step, attempt,
    resend), namely the bank's row; the bank's rows for another attempt or resend differ."""
    scenario = random_first_token_scenario()
    n = 50
    arrivals = np.arange(n) * 100.0
    streams = Streams(4, "main")
    bank = CallDrawBank(streams.child("calls"), n)
    steps = compile_scenario(scenario).workflow.steps
    seen = []
    for name in ("wait", "cut"):
        policy = build_policy(
            name,
            scenario.policies[name],
            compile_scenario(scenario).routes,
            steps,
            {"s1": 1e3, "s2": 1e3},
        )
        records = Simulation(compile_scenario(scenario), policy, bank, streams).run(arrivals)
        seen.append({(c.step, c.run.index): c.ttft for c in records.calls})
    assert seen[0] == seen[1]
    latency = compile_scenario(scenario).latencies[("p1", "big")]
    for step_id in ("s1", "s2"):
        rows = bank.draws(step_id, 0, 0, ("p1", "big"), latency, 100).ttft
        assert [seen[0][(step_id, i)] for i in range(n)] == rows
        for attempt, resend in ((1, 0), (0, 1)):
            other = bank.draws(step_id, attempt, resend, ("p1", "big"), latency, 100).ttft
            assert not np.isclose(other, rows).any()
