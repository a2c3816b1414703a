"""Behaviour an audit found untested: re-sends draw afresh, a 429 whose Retry-After outlives the
deadline is given up at once, race and hedge meeting 429s, and one draw bank shared by policies.

Each test here was seen to fail under the mutation it guards against (listed in its docstring).
Timelines are exact: calls are scripted (`ScriptedBank`) or constant, and quotas are sized in
whole calls: a step's call asks for 1000 + 100 = 1100 tokens, so a TPM of 1100 admits one call a
minute, and a full bucket refills 1100/60 tokens a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sim
from sim.engine.simulation import Simulation, serving_latencies
from sim.model.streams import CallDrawBank, Streams
from sim.model.workflow import Workflow
from sim.policy.build import build_policy
from tests.helpers import ScriptedBank, build, const, ok, serving, simulate, step, timeline

#: Tokens of one call of `helpers.step` (1000 input + 100 output): a TPM of this admits one.
CALL_TOKENS = 1100


def _one_call_a_minute(*names: str) -> dict[str, Any]:
    """Providers p1, p2 serving `big` (1 s + 1 s constant); those named get a one-call TPM."""
    return {
        p: {"serves": {"big": serving()}, **({"tpm": CALL_TOKENS} if p in names else {})}
        for p in ("p1", "p2")
    }


def _request(result: Any, index: int) -> pd.Series:
    """The first run of request `index`."""
    req = result.requests
    return req[(req["request_id"] == index) & (req["resend"] == 0)].iloc[0]


def _calls_of(result: Any, index: int) -> list[tuple]:
    """Exact timeline of request `index`'s calls."""
    return timeline(result.calls[result.calls["request_id"] == index])


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
    latency = serving_latencies(scenario)[("p1", "big")]
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


# ----------------------------------------------------------------------------- 429 and deadline


def _wait_on_a_binding_quota(deadline_s: float) -> Any:
    """wait with 2 retries on p1 admitting one call a minute: request 0 at t=0 takes the
    bucket, request 1 at t=1 is refused with Retry-After (1100 - 1100/60) / (1100/60) = 59 s."""
    scenario = build(
        [step("s1")],
        {"wait": {"kind": "wait", "retries": 2}},
        providers=_one_call_a_minute("p1"),
        deadline_s=deadline_s,
    )
    return simulate(scenario, "wait", ScriptedBank({}, n_requests=2), [0.0, 1.0])


def test_a_429_whose_retry_after_outlives_the_deadline_fails_at_once() -> None:
    """Mutation: `if call.retry_after >= run.time_left: return False` removed from Sequential.
    With 29 s left and a 59 s Retry-After, the step gives up at the 429 (t=1, reason
    rate_limited), not by sleeping into the deadline (t=31, reason deadline)."""
    result = _wait_on_a_binding_quota(deadline_s=30.0)
    (refused,) = result.calls[result.calls["request_id"] == 1].itertuples()
    assert refused.outcome == "rate_limited"
    assert refused.retry_after_s > 30.0 - 1.0  # more than the time left
    run = _request(result, 1)
    assert (bool(run.ok), float(run.end_s)) == (False, 1.0)
    assert (run.fail_reason, run.fail_step) == ("rate_limited", "s1")
    assert float(run.latency_s) == 30.0  # a failed run counts at the deadline


def test_a_429_the_deadline_can_fund_is_retried_after_its_retry_after() -> None:
    """The other side of the same branch: with 99 s left the retry waits out Retry-After
    (whatever value the provider gives) and then succeeds."""
    result = _wait_on_a_binding_quota(deadline_s=100.0)
    first, second = (
        result.calls[result.calls["request_id"] == 1].sort_values("attempt").itertuples()
    )
    assert first.outcome == "rate_limited"
    assert second.outcome == "ok"
    assert second.start_s == pytest.approx(1.0 + first.retry_after_s, abs=1e-9)
    run = _request(result, 1)
    assert bool(run.ok)
    assert float(run.end_s) == pytest.approx(second.start_s + 2.0, abs=1e-9)


# ------------------------------------------------------------------------ race and hedge on 429s


def _race(limited: Sequence[str]) -> Any:
    """A race of two on [p1, p2]: request 0 at t=0 takes the quota of the `limited` providers,
    request 1 at t=10 meets their 429s."""
    scenario = build(
        [step("s1")],
        {"race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]}},
        providers=_one_call_a_minute(*limited),
    )
    return simulate(scenario, "race", ScriptedBank({}, n_requests=2), [0.0, 10.0])


def test_a_race_with_one_rate_limited_attempt_wins_on_the_other() -> None:
    """Mutations: a race counting any finished attempt as its win (a 429 'wins' at t=10), or
    giving up when one attempt fails. The 429 ends at once and costs nothing; p2 wins at 12."""
    result = _race(limited=["p1"])
    assert _calls_of(result, 1) == [
        ("s1", 0, "p1", "big", 10.0, 10.0, "rate_limited"),
        ("s1", 1, "p2", "big", 10.0, 12.0, "ok"),
    ]
    run = _request(result, 1)
    assert (bool(run.ok), float(run.latency_s)) == (True, 2.0)
    assert float(run.cost_usd) == pytest.approx(1000 * 1e-6 + 100 * 2e-6)  # the winner only


def test_a_race_whose_attempts_are_all_rate_limited_fails_at_once() -> None:
    """Every attempt refused: the step fails at the 429s (t=10), reason rate_limited."""
    result = _race(limited=["p1", "p2"])
    assert [c[-1] for c in _calls_of(result, 1)] == ["rate_limited", "rate_limited"]
    run = _request(result, 1)
    assert (bool(run.ok), float(run.end_s), run.fail_reason) == (False, 10.0, "rate_limited")


def _hedge(limited: Sequence[str], first_primary: Any) -> Any:
    """A hedge on p2 after 2 s, primary on p1: request 0 at t=0 (primary `first_primary`) takes
    the quota of the `limited` providers it calls; request 1 at t=20 meets their 429s."""
    scenario = build(
        [step("s1")],
        {"hedge": {"kind": "hedge", "after": 2.0, "providers": ["p2"]}},
        providers=_one_call_a_minute(*limited),
    )
    bank = ScriptedBank(lambda s, a, i: first_primary if (i, a) == (0, 0) else ok(), 2)
    return simulate(scenario, "hedge", bank, [0.0, 20.0], thresholds={"s1": 2.0})


def test_a_hedge_whose_primary_is_rate_limited_fires_its_hedge_at_once() -> None:
    """Mutation: the hedge fires only `after` past the primary (`env.now >= next_fire`, not
    also when nothing is pending): the hedge would start at 22, not at the 429 (t=20)."""
    result = _hedge(limited=["p1"], first_primary=ok(0.5, 0.5))
    assert _calls_of(result, 0) == [("s1", 0, "p1", "big", 0.0, 1.0, "ok")]
    assert _calls_of(result, 1) == [
        ("s1", 0, "p1", "big", 20.0, 20.0, "rate_limited"),
        ("s1", 1, "p2", "big", 20.0, 22.0, "ok"),
    ]
    assert (bool(_request(result, 1).ok), float(_request(result, 1).latency_s)) == (True, 2.0)


def test_a_hedge_whose_calls_are_all_rate_limited_fails_at_once() -> None:
    """Request 0's slow primary makes it fire its hedge, so both quotas are spent; request 1's
    primary and hedge are both refused at t=20 and the step fails there."""
    result = _hedge(limited=["p1", "p2"], first_primary=ok(1.0, 9.0))
    assert [c[1:3] for c in _calls_of(result, 0)] == [(0, "p1"), (1, "p2")]
    assert _calls_of(result, 1) == [
        ("s1", 0, "p1", "big", 20.0, 20.0, "rate_limited"),
        ("s1", 1, "p2", "big", 20.0, 20.0, "rate_limited"),
    ]
    run = _request(result, 1)
    assert (bool(run.ok), float(run.end_s), run.fail_reason) == (False, 20.0, "rate_limited")


# ----------------------------------------------------------------------------- shared draw bank


def _random_first_token_scenario() -> Any:
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
    scenario = _random_first_token_scenario()
    n = 50
    arrivals = np.arange(n) * 100.0
    streams = Streams(4, "main")
    bank = CallDrawBank(streams.child("calls"), n)
    steps = Workflow.from_scenario(scenario).steps
    seen = []
    for name in ("wait", "cut"):
        policy = build_policy(
            name, scenario.policies[name], scenario, steps, {"s1": 1e3, "s2": 1e3}
        )
        records = Simulation(scenario, policy, bank, streams).run(arrivals)
        seen.append({(c.step, c.run.index): c.ttft for c in records.calls})
    assert seen[0] == seen[1]
    latency = serving_latencies(scenario)[("p1", "big")]
    for step_id in ("s1", "s2"):
        rows = bank.draws(step_id, 0, 0, ("p1", "big"), latency, 100).ttft
        assert [seen[0][(step_id, i)] for i in range(n)] == rows
        for attempt, resend in ((1, 0), (0, 1)):
            other = bank.draws(step_id, attempt, resend, ("p1", "big"), latency, 100).ttft
            assert not np.isclose(other, rows).any()


def test_run_gives_every_policy_the_same_draws() -> None:
    """Mutation: `sim.run` gives each policy its own bank (e.g. a stream per policy name).
    Through the public API, wait and cut see the same first token on every call."""
    result = sim.run(_random_first_token_scenario(), requests=40, seed=5)
    calls = result.calls.set_index(["policy", "request_id", "step", "attempt"])["ttft_s"]
    wait, cut = calls.loc["wait"].sort_index(), calls.loc["cut"].sort_index()
    assert len(wait) == 80
    assert wait.notna().all()
    pd.testing.assert_series_equal(wait, cut)
