"""sim.policy.kinds: exact timelines of wait, cut, race, hedge and downshift on scripted calls,
and how each meets a 429 (a Retry-After past the deadline, a race or hedge with attempts
refused).

Every call here is scripted (first token, generation, outcome per step and attempt) and queue-free,
so each timeline is known to the second. The scenario's default call is 1 s + 1 s = 2 s, ok."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import pytest

from sim.model.config import CutPolicy, HedgePolicy, RacePolicy, WaitPolicy
from sim.plan import compile_scenario
from sim.policy.build import build_policy
from sim.policy.kinds.hedge import Hedge
from sim.policy.kinds.race import Race
from sim.policy.kinds.sequential import Sequential
from sim.policy.plans import Attempt
from tests.helpers import (
    BIG_IN,
    BIG_OUT,
    ScriptedBank,
    build,
    error,
    invalid,
    ok,
    serving,
    simulate,
    step,
    timeline,
)

POLICIES = {
    "wait": {"kind": "wait", "retries": 2},
    "wait_t": {"kind": "wait", "timeout_s": 3.0, "retries": 1},
    "cut": {"kind": "cut", "cutoff": 3.0, "retries": 2},
    "race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]},
    "race3": {"kind": "race", "attempts": 3, "providers": ["p1", "p2"], "retries": 1},
    "race_t": {"kind": "race", "attempts": 2, "timeout_s": 3.0, "retries": 1},
    "hedge": {"kind": "hedge", "after": 2.0, "providers": ["p2"]},
    "hedge2": {"kind": "hedge", "after": 2.0, "providers": ["p2", "p1"], "hedges": 2},
    "down": {"kind": "downshift", "cutoff": 3.0, "to": "small"},
}
SCENARIO = build([step("s1")], POLICIES)
SECONDS = {"cut": {"s1": 3.0}, "hedge": {"s1": 2.0}, "hedge2": {"s1": 2.0}, "down": {"s1": 3.0}}


def run(policy: str, script: dict, arrival: float = 0.0) -> tuple[list[tuple], float, bool]:
    """Timeline, time from arrival to the request's end, and success of one request under
    `policy` (a failed request's `latency_s` is the deadline; its end is when it failed)."""
    result = simulate(
        SCENARIO, policy, ScriptedBank(script), [arrival], thresholds=SECONDS.get(policy)
    )
    request = result.requests.iloc[0]
    ended = float(request.end_s - request.arrival_s)
    if request.ok:
        assert ended == float(request.latency_s)
    return timeline(result.calls), ended, bool(request.ok)


# ----------------------------------------------------------------------------- plans


def test_plans_follow_the_spec() -> None:
    steps = compile_scenario(SCENARIO).workflow.steps
    wait = build_policy(
        "wait_t", SCENARIO.policies["wait_t"], compile_scenario(SCENARIO).routes, steps, {}
    )
    assert isinstance(wait, Sequential)
    assert wait.plans["s1"] == [Attempt("p1", "big", 3.0)] * 2
    cut = build_policy(
        "cut", SCENARIO.policies["cut"], compile_scenario(SCENARIO).routes, steps, {"s1": 4.5}
    )
    assert isinstance(cut, Sequential)
    assert cut.plans["s1"] == [Attempt("p1", "big", 4.5)] * 3  # threshold from `seconds`
    race = build_policy(
        "race3", SCENARIO.policies["race3"], compile_scenario(SCENARIO).routes, steps, {}
    )
    assert isinstance(race, Race)
    one = [Attempt("p1", "big", None), Attempt("p2", "big", None), Attempt("p1", "big", None)]
    assert race.rounds["s1"] == [one, one]
    hedge = build_policy(
        "hedge2", SCENARIO.policies["hedge2"], compile_scenario(SCENARIO).routes, steps, {"s1": 2.0}
    )
    assert isinstance(hedge, Hedge)
    assert hedge.plans["s1"] == [
        Attempt("p1", "big", None),
        Attempt("p2", "big", None),
        Attempt("p1", "big", None),
    ]
    assert hedge.after == {"s1": 2.0}
    down = build_policy(
        "down", SCENARIO.policies["down"], compile_scenario(SCENARIO).routes, steps, {"s1": 3.0}
    )
    assert isinstance(down, Sequential)
    assert down.plans["s1"] == [Attempt("p1", "big", 3.0), Attempt("p1", "small", None)]


def test_policy_providers_route_attempts_in_turn() -> None:
    steps = compile_scenario(SCENARIO).workflow.steps
    spec = WaitPolicy(kind="wait", retries=3, providers=["p2", "p1"])
    policy = build_policy("w", spec, compile_scenario(SCENARIO).routes, steps, {})
    assert isinstance(policy, Sequential)
    assert [a.provider for a in policy.plans["s1"]] == ["p2", "p1", "p2", "p1"]
    # a listed provider that does not serve the model is skipped
    lognormal = {"ttft_s": {"median": 1, "p99": 2}, "tokens_per_s": {"median": 9, "p99": 20}}
    only_p1 = build(
        [step("s1")],
        providers={"p1": {"serves": {"big": lognormal}}, "p2": {"serves": {"small": lognormal}}},
    )
    steps = compile_scenario(only_p1).workflow.steps
    routes = compile_scenario(only_p1).routes
    cut = build_policy(
        "c", CutPolicy(kind="cut", cutoff=1.0, providers=["p2", "p1"]), routes, steps, {"s1": 1.0}
    )
    assert isinstance(cut, Sequential)
    assert {a.provider for a in cut.plans["s1"]} == {"p1"}
    race = build_policy("r", RacePolicy(kind="race", providers=["p2", "p1"]), routes, steps, {})
    assert isinstance(race, Race)
    assert {a.provider for a in race.rounds["s1"][0]} == {"p1"}
    hedge = build_policy(
        "h",
        HedgePolicy(kind="hedge", after=1.0, providers=["p2", "p1"]),
        routes,
        steps,
        {"s1": 1.0},
    )
    assert isinstance(hedge, Hedge)
    assert {a.provider for a in hedge.plans["s1"]} == {"p1"}


# ----------------------------------------------------------------------------- wait


def test_wait_retries_after_an_error() -> None:
    calls, latency, success = run("wait", {("s1", 0): error(ttft=1.0), ("s1", 1): ok(1.0, 2.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 1.0, "error"),
        ("s1", 1, "p1", "big", 1.0, 4.0, "ok"),
    ]
    assert (latency, success) == (4.0, True)


def test_wait_retries_after_junk_then_gives_up() -> None:
    script = {("s1", 0): invalid(0.5), ("s1", 1): error(0.25), ("s1", 2): invalid(1.0)}
    calls, latency, success = run("wait", script)
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 0.5, "invalid"),
        ("s1", 1, "p1", "big", 0.5, 0.75, "error"),
        ("s1", 2, "p1", "big", 0.75, 1.75, "invalid"),
    ]
    assert (latency, success) == (1.75, False)  # fails when retries run out, not at the deadline


def test_wait_does_not_retry_a_success() -> None:
    calls, latency, success = run("wait", {("s1", 0): ok(1.0, 20.0)}, arrival=3.0)
    assert calls == [("s1", 0, "p1", "big", 3.0, 24.0, "ok")]
    assert (latency, success) == (21.0, True)


def test_wait_timeout_cuts_and_retries() -> None:
    calls, latency, success = run("wait_t", {("s1", 0): ok(1.0, 10.0), ("s1", 1): ok(1.0, 1.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 1, "p1", "big", 3.0, 5.0, "ok"),
    ]
    assert (latency, success) == (5.0, True)


# ----------------------------------------------------------------------------- cut


def test_cut_cuts_at_the_cutoff_and_retries() -> None:
    script = {("s1", 0): ok(1.0, 10.0), ("s1", 1): ok(2.0, 30.0), ("s1", 2): ok(0.5, 1.0)}
    calls, latency, success = run("cut", script)
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 1, "p1", "big", 3.0, 6.0, "timeout"),
        ("s1", 2, "p1", "big", 6.0, 7.5, "ok"),
    ]
    assert (latency, success) == (7.5, True)


def test_cut_leaves_fast_calls_alone() -> None:
    calls, latency, _ = run("cut", {("s1", 0): ok(1.0, 1.5)})
    assert calls == [("s1", 0, "p1", "big", 0.0, 2.5, "ok")]
    assert latency == 2.5


# ----------------------------------------------------------------------------- race


def test_race_starts_all_at_once_and_cancels_the_loser_at_the_winners_end() -> None:
    calls, latency, success = run("race", {("s1", 0): ok(1.0, 9.0), ("s1", 1): ok(1.0, 2.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "cancelled"),
        ("s1", 1, "p2", "big", 0.0, 3.0, "ok"),
    ]
    assert (latency, success) == (3.0, True)


def test_race_loser_is_billed_per_the_rule() -> None:
    result = simulate(
        SCENARIO, "race", ScriptedBank({("s1", 0): ok(1.0, 9.0), ("s1", 1): ok(1.0, 2.0)})
    )
    loser = result.calls[result.calls["outcome"] == "cancelled"].iloc[0]
    # billing.cancelled defaults to 'full': the provider generates (and bills) the whole answer
    assert (loser.input_tokens, loser.output_tokens) == (1000, 100)
    assert loser.cost_usd == pytest.approx(1000 * BIG_IN + 100 * BIG_OUT, rel=1e-12)


def test_race_an_invalid_first_answer_does_not_win() -> None:
    calls, latency, success = run("race", {("s1", 0): ok(1.0, 4.0), ("s1", 1): invalid(1.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 5.0, "ok"),
        ("s1", 1, "p2", "big", 0.0, 1.0, "invalid"),
    ]
    assert (latency, success) == (5.0, True)


def test_race_spreads_attempts_over_providers_and_retries_whole_rounds() -> None:
    script = {
        ("s1", 0): error(1.0),
        ("s1", 1): invalid(2.0),
        ("s1", 2): error(0.5),  # round 0 over at 2.0
        ("s1", 3): ok(1.0, 1.0),  # 2.0 -> 4.0 wins
        ("s1", 4): ok(1.0, 5.0),  # cancelled at 4.0
        ("s1", 5): ok(1.0, 1.5),  # cancelled at 4.0 (would end at 4.5)
    }
    calls, latency, success = run("race3", script)
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 1.0, "error"),
        ("s1", 1, "p2", "big", 0.0, 2.0, "invalid"),
        ("s1", 2, "p1", "big", 0.0, 0.5, "error"),
        ("s1", 3, "p1", "big", 2.0, 4.0, "ok"),
        ("s1", 4, "p2", "big", 2.0, 4.0, "cancelled"),
        ("s1", 5, "p1", "big", 2.0, 4.0, "cancelled"),
    ]
    assert (latency, success) == (4.0, True)


def test_race_fails_when_every_attempt_fails() -> None:
    calls, latency, success = run("race", {("s1", 0): error(1.0), ("s1", 1): invalid(3.0)})
    assert [c[-1] for c in calls] == ["error", "invalid"]
    assert (latency, success) == (3.0, False)


def test_race_timeout_cuts_every_attempt_then_races_again() -> None:
    script = {
        ("s1", 0): ok(1.0, 9.0),
        ("s1", 1): ok(2.0, 9.0),
        ("s1", 2): ok(1.0, 0.5),
        ("s1", 3): ok(1.0, 9.0),
    }
    calls, latency, success = run("race_t", script)
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 1, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 2, "p1", "big", 3.0, 4.5, "ok"),
        ("s1", 3, "p1", "big", 3.0, 4.5, "cancelled"),
    ]
    assert (latency, success) == (4.5, True)


# ----------------------------------------------------------------------------- hedge


def test_hedge_fires_exactly_after_the_delay_and_first_valid_wins() -> None:
    calls, latency, success = run("hedge", {("s1", 0): ok(1.0, 9.0), ("s1", 1): ok(1.0, 2.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 5.0, "cancelled"),
        ("s1", 1, "p2", "big", 2.0, 5.0, "ok"),
    ]
    assert (latency, success) == (5.0, True)


def test_hedge_primary_can_still_win() -> None:
    calls, latency, _ = run("hedge", {("s1", 0): ok(1.0, 2.5), ("s1", 1): ok(1.0, 5.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.5, "ok"),
        ("s1", 1, "p2", "big", 2.0, 3.5, "cancelled"),
    ]
    assert latency == 3.5


def test_hedge_fires_at_once_when_the_primary_fails_fast() -> None:
    calls, latency, success = run("hedge", {("s1", 0): error(0.5), ("s1", 1): ok(1.0, 1.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 0.5, "error"),
        ("s1", 1, "p2", "big", 0.5, 2.5, "ok"),
    ]
    assert (latency, success) == (2.5, True)


def test_hedge_not_fired_when_the_primary_answers_in_time() -> None:
    calls, latency, _ = run("hedge", {("s1", 0): ok(1.0, 0.5)})
    assert calls == [("s1", 0, "p1", "big", 0.0, 1.5, "ok")]
    assert latency == 1.5


def test_hedges_chain_each_after_the_previous() -> None:
    script = {("s1", 0): ok(1.0, 20.0), ("s1", 1): ok(1.0, 20.0), ("s1", 2): ok(1.0, 1.0)}
    calls, latency, _ = run("hedge2", script)
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 6.0, "cancelled"),
        ("s1", 1, "p2", "big", 2.0, 6.0, "cancelled"),
        ("s1", 2, "p1", "big", 4.0, 6.0, "ok"),
    ]
    assert latency == 6.0


def test_hedge_fails_when_all_fail() -> None:
    calls, latency, success = run("hedge", {("s1", 0): error(0.5), ("s1", 1): invalid(1.0)})
    assert [c[-1] for c in calls] == ["error", "invalid"]
    assert (latency, success) == (1.5, False)


# ----------------------------------------------------------------------------- downshift


def test_downshift_cuts_at_the_cutoff_then_runs_on_the_smaller_model() -> None:
    calls, latency, success = run("down", {("s1", 0): ok(1.0, 10.0), ("s1", 1): ok(0.5, 1.0)})
    assert calls == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 1, "p1", "small", 3.0, 4.5, "ok"),
    ]
    assert (latency, success) == (4.5, True)


def test_downshift_after_an_error_also_moves_to_the_smaller_model() -> None:
    calls, _, success = run("down", {("s1", 0): error(0.5), ("s1", 1): ok(0.5, 0.5)})
    assert [(c[1], c[3], c[4], c[5], c[6]) for c in calls] == [
        (0, "big", 0.0, 0.5, "error"),
        (1, "small", 0.5, 1.5, "ok"),
    ]
    assert success


def test_downshift_fast_big_answer_is_kept() -> None:
    calls, latency, _ = run("down", {("s1", 0): ok(1.0, 1.0)})
    assert calls == [("s1", 0, "p1", "big", 0.0, 2.0, "ok")]
    assert latency == 2.0


def test_downshift_moves_to_a_provider_serving_the_smaller_model() -> None:
    providers = {"p1": {"serves": {"big": serving()}}, "p2": {"serves": {"small": serving()}}}
    scenario = build(
        [step("s1")],
        {"down": {"kind": "downshift", "cutoff": 3.0, "to": "small"}},
        providers=providers,
    )
    bank = ScriptedBank({("s1", 0): ok(1.0, 10.0), ("s1", 1): ok(0.5, 1.0)})
    result = simulate(scenario, "down", bank, thresholds={"s1": 3.0})
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "timeout"),
        ("s1", 1, "p2", "small", 3.0, 4.5, "ok"),
    ]


def test_race_loser_queued_behind_its_winner_costs_nothing() -> None:
    """On one provider with one slot, the loser gets the slot at the instant it is cancelled:
    it was never served for any time, so it bills nothing and leaves no work running."""
    scenario = build(
        [step("s1")],
        {"race": {"kind": "race", "attempts": 2, "providers": ["p1"]}},
        providers={"p1": {"concurrency": 1, "serves": {"big": serving()}}},
    )
    result = simulate(scenario, "race", ScriptedBank({("s1", 0): ok(1.0, 2.0)}))
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 3.0, "ok"),
        ("s1", 1, "p1", "big", 0.0, 3.0, "cancelled"),
    ]
    loser = result.calls[result.calls["outcome"] == "cancelled"].iloc[0]
    assert (loser.queue_s, loser.input_tokens, loser.output_tokens, loser.cost_usd) == (
        3.0,
        0,
        0,
        0.0,
    )


# ----------------------------------------------------------------------------- meeting 429s

# Quotas sized in whole calls: a step's call asks for 1000 + 100 = 1100 tokens, so a TPM of 1100
# admits one call a minute, and a full bucket refills 1100/60 tokens a second. Each test below
# was seen to fail under the mutation its docstring names.

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
