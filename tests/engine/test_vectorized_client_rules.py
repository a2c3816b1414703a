"""The vectorized engine against the event engine under the providers' client rules.

A provider's client (`providers.P.sdk`: the SDK's hidden retries, its per-attempt `timeout_s`,
`honours_deadline`; `overhead_s` / `overhead_held`: client time around each call) acts inside
one policy attempt. Where nothing is shared each request's calls still depend on its own draws
only, so the vectorized engine runs these rules per call and must give the event engine's tables:
every column of every request and every call (rtol 1e-12, as tests/unit/test_vectorized.py),
for each preset, a client timeout that cuts, both deadline rules, overhead constant and
lognormal with held shares 0, 0.5 and 1, each of the five policies and each billing rule.
Constant latencies then put a cancellation (the deadline, a race winner, a hedge winner, a run
failed by another branch) exactly where it matters: during the client's backoff sleep, during
its retry call, during the overhead's after part; each such test checks that the event engine
really did it there and that the vectorized engine computed it itself (no request replayed).
Then the engine choice (`engine:` line, the default scenario to the last bit, chunks) and
`tailsim nines` on the same tilted draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sim
import sim.engine.choice
from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine import qualify
from sim.engine.choice import single_policy, vectorized_tables
from sim.engine.simulation import Simulation
from sim.engine.vector_tables import tables
from sim.engine.vectorized import VectorizedSimulation, exact_clock_groups
from sim.model.arrivals import arrival_times
from sim.model.config import Scenario
from sim.model.latency import Constant
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario, features
from sim.policy.build import build_policy
from sim.rare.batch import make_setup, run_batch
from sim.rare.nines import estimate_nines
from sim.rare.tilt import SlotTilt, Tilt, TiltedDrawBank, identity_tilt, slot_keys
from tests.helpers import build, const, resolved_plan, serving, step

RTOL = 1e-12


def both_engines(
    scenario: Scenario,
    policy: str,
    n: int = 150,
    arrivals: Sequence[float] | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame, int]:
    """(requests, calls) of the event engine, (requests, calls) of the vectorized one, and how
    many requests the vectorized engine handed to the event engine to replay."""
    plan = resolved_plan(scenario, seed)
    runtime = single_policy(plan.runtime(policy))  # per-step seconds as one policy
    streams = Streams(seed, "main")
    times = (
        arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
        if arrivals is None
        else np.asarray(arrivals, dtype=float)
    )
    bank = CallDrawBank(streams.child("calls"), len(times))
    records = Simulation(plan, runtime, bank, streams).run(times)
    engine = VectorizedSimulation(plan, runtime, bank)
    replayed: list[int] = []
    replay = engine._replay

    def counting(which: np.ndarray, *args: Any) -> Any:
        replayed.append(len(which))
        return replay(which, *args)

    engine._replay = counting  # type: ignore[method-assign]
    _, runs, calls = engine.run(times)
    fast = tables(plan, policy, runs, calls)
    return (
        requests_frame(records), calls_frame(records), fast.requests, fast.calls, sum(replayed)
    )  # fmt: skip


def assert_same(scenario: Scenario, policy: str, replays: bool = True, **kwargs: Any) -> Any:
    """Both engines agree per request and per call (rtol 1e-12); with `replays` False the
    vectorized engine computed every request itself. Returns the event engine's calls with the
    requests' `fail_reason` as `run_fail_reason` and its requests."""
    des_requests, des_calls, vec_requests, vec_calls, replayed = both_engines(
        scenario, policy, **kwargs
    )
    pd.testing.assert_frame_equal(vec_requests, des_requests, check_exact=False, rtol=RTOL)
    pd.testing.assert_frame_equal(vec_calls, des_calls, check_exact=False, rtol=RTOL)
    if not replays:
        assert replayed == 0
    calls = des_calls.assign(
        run_fail_reason=des_calls["request_id"].map(des_requests["fail_reason"])
    )
    return calls, des_requests


# ---------------------------------------------------------------- heavy tails, every rule


def lognormal(median: float, p99: float) -> dict[str, float]:
    return {"median": median, "p99": p99}


def tail_serving(ttft: float = 0.8, speed: float = 80.0) -> dict[str, Any]:
    """Heavy-tailed first token, stalls, 12% hard errors and 12% junk."""
    return {
        "ttft_s": lognormal(ttft, ttft * 6),
        "tokens_per_s": lognormal(speed, speed * 2),
        "stall": {"probability": 0.08, "extra_s": lognormal(6.0, 25.0)},
        "error_rate": 0.12,
        "invalid_rate": 0.12,
    }


POLICIES: dict[str, dict[str, Any]] = {
    "wait": {"kind": "wait", "timeout_s": 9.0, "retries": 1, "providers": ["p1", "p2"]},
    "cut": {"kind": "cut", "cutoff": 4.0, "retries": 2},
    "race": {
        "kind": "race",
        "attempts": 2,
        "retries": 1,
        "timeout_s": 6.0,
        "providers": ["p1", "p2"],
    },
    "hedge": {"kind": "hedge", "after": 1.5, "hedges": 2, "providers": ["p2", "p1"]},
    "downshift": {"kind": "downshift", "cutoff": 2.5, "to": "small", "retries": 2},
}


def client_scenario(
    client: dict[str, Any],
    other: dict[str, Any] | None = None,
    billing: str = "full",
    deadline_s: float = 10.0,
    steps: Sequence[dict[str, Any]] | None = None,
) -> Scenario:
    """Three steps (or `steps`) on two heavy-tailed providers: p1 with client rules `client`,
    p2 with `other` (default: the same)."""
    other = client if other is None else other
    return build(
        steps or [step("s1"), step("s2", "s1"), step("s3", "s2")],
        POLICIES,
        providers={
            "p1": {"serves": {"big": tail_serving(), "small": tail_serving(0.3, 200.0)}, **client},
            "p2": {
                "serves": {"big": tail_serving(1.0, 70.0), "small": tail_serving(0.4, 180.0)},
                **other,
            },
        },
        deadline_s=deadline_s,
        billing={"cancelled": billing},
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
    )


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("preset", ["openai", "anthropic", "litellm"])
def test_each_preset_with_a_timeout_that_cuts(preset: str, policy: str, billing: str) -> None:
    """Each preset with a 2.5 s per-attempt timeout (its retries of 5xx and of its own timeouts,
    its backoff and jitter) and overhead on one provider, every policy, every billing rule."""
    client = {
        "sdk": {"preset": preset, "timeout_s": 2.5},
        "overhead_s": lognormal(0.05, 0.4),
        "overhead_held": 0.5,
    }
    calls, _ = assert_same(client_scenario(client, {"sdk": preset}, billing), policy)
    assert calls["sdk_retry"].gt(0).any()  # the client retried ...
    assert calls["ended_by"].eq("sdk").any()  # ... its own timeouts too
    assert {"ok", "error", "invalid", "timeout"} <= set(calls["outcome"])
    assert calls["run_fail_reason"].eq("deadline").any()


OVERHEADS = {"constant": const(0.2), "lognormal": lognormal(0.05, 0.5)}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("held", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("law", list(OVERHEADS))
def test_overhead_with_every_held_share(law: str, held: float, policy: str) -> None:
    """Overhead on both providers (over openai's client), billed by elapsed time: the held part
    delays the first token, the rest the end the caller sees."""
    client = {"sdk": "openai", "overhead_s": OVERHEADS[law], "overhead_held": held}
    calls, _ = assert_same(client_scenario(client, billing="elapsed"), policy)
    assert calls["overhead_s"].gt(0).all()
    assert calls["outcome"].eq("cancelled").any() or policy in ("wait", "cut", "downshift")


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("honours", [True, False])
def test_both_deadline_rules_under_a_tight_deadline(honours: bool, policy: str) -> None:
    """Long backoff waits (2 s, then 4 s) against a 6 s deadline and the policies' cuts: a
    client that honours the deadline gives up, one that does not sleeps into the cut or the
    deadline's cancellation."""
    client = {
        "sdk": {
            "preset": "openai",
            "retries": 3,
            "timeout_s": 1.8,
            "backoff": {"base_s": 2.0, "jitter": "equal"},
            "honours_deadline": honours,
        }
    }
    calls, _ = assert_same(client_scenario(client, deadline_s=6.0, billing="elapsed"), policy)
    assert calls["sdk_retry"].gt(0).any()


#: Clients and the failures each retries: `none` retries 429s and 5xx (not its own timeouts)
#: with full jitter; one retries only its timeouts; litellm every kind, with its jitter.
RETRIES = [
    ({"retries": 2, "timeout_s": 2.0, "backoff": {"jitter": "full"}}, {"error"}),
    ({"retries": 2, "timeout_s": 2.0, "retry_on": ["timeout"]}, {"timeout"}),
    ({"preset": "litellm", "retries": 3, "timeout_s": 2.0, "retry_after_jitter_s": 2.0},
     {"error", "timeout"}),
]  # fmt: skip


@pytest.mark.parametrize(("sdk", "retried"), RETRIES)
def test_what_each_client_retries(sdk: dict[str, Any], retried: set[str]) -> None:
    scenario = client_scenario({"sdk": sdk}, {})
    for policy in ("wait", "race", "hedge"):
        calls, _ = assert_same(scenario, policy)
        again = calls[calls["sdk_retry"] > 0]
        assert len(again)
        outcome = calls.set_index(["request_id", "step", "attempt", "sdk_retry"])["outcome"]
        before = {outcome[(r.request_id, r.step, r.attempt, r.sdk_retry - 1)]
                  for r in again.itertuples()}  # fmt: skip
        assert before == retried


def test_a_dag_whose_failing_branch_cancels_a_clients_attempt() -> None:
    """Two branches: a required failure in one cancels the other's calls in flight, its client
    sleeps and its overhead's after parts (`ended_by` run), billed per the rule."""
    steps = [
        step("a"),
        step("b", "a", required=False),
        step("c", "a"),
        step("d", "b", required=False),
        step("e", "c"),
        step("f", "c", "d"),
        step("g", "e", required=False),
    ]
    client = {
        "sdk": {"preset": "openai", "timeout_s": 3.0},
        "overhead_s": lognormal(0.3, 2.0),
        "overhead_held": 0.3,
    }
    reasons, ended = set(), set()
    for billing in ("full", "elapsed", "none"):
        scenario = client_scenario(client, billing=billing, deadline_s=25.0, steps=steps)
        for policy in ("wait", "race", "hedge", "cut"):
            calls, _ = assert_same(scenario, policy, n=250)
            reasons |= set(calls["run_fail_reason"])
            ended |= set(calls["ended_by"])
    assert {"error", "invalid", "deadline"} <= reasons
    assert {"run", "sdk", "deadline", "loser"} <= ended


# ---------------------------------------------------------------- exact timelines


ARRIVALS = (0.0, 1.0, 2.5, 7.0)
#: An error rate that errs on every call of these tests (the format keeps it below 1).
ALWAYS = 1 - 1e-9


def timed(
    policies: dict[str, Any],
    p1: dict[str, Any],
    p2: dict[str, Any] | None = None,
    billing: str = "full",
    **overrides: Any,
) -> Scenario:
    """One step on p1 (client rules in `p1`: its `serving` plus provider keys) or its
    policy's providers; p2 a plain provider answering 1.5 s to first token plus 1 s."""
    providers = {
        "p1": {"serves": {"big": p1.pop("serving")}, **p1},
        "p2": {"serves": {"big": serving(ttft=1.5)}, **(p2 or {})},
    }
    return build(
        [step("s1", provider="p1")],
        policies,
        providers=providers,
        billing={"cancelled": billing},
        **overrides,
    )


#: A client whose every call errors at 1 s, then sleeps 5 s before its retry.
SLEEPER = {
    "serving": serving(ttft=1.0, error_rate=ALWAYS),
    "sdk": {"retries": 2, "backoff": {"base_s": 5.0, "jitter": "none"}, "honours_deadline": False},
}
#: A client cutting each call at 1.2 s (its timeout; a call takes 2 s), 0.5 s before a retry:
#: its retry runs from 1.7 s to 2.9 s.
RETRIER = {
    "serving": serving(ttft=1.0),
    "sdk": {"retries": 2, "timeout_s": 1.2, "retry_on": ["timeout"],
            "backoff": {"base_s": 0.5, "jitter": "none"}},
}  # fmt: skip
#: A client with 1 s of overhead after each 2 s call: the provider is done at 2 s, the caller
#: sees it at 3 s.
LATE = {"serving": serving(ttft=1.0), "overhead_s": const(1.0), "overhead_held": 0.0}

WHERE = {"sleep": SLEEPER, "retry call": RETRIER, "after part": LATE}
#: When each is cancelled: during its sleep (1 s to 6 s), its retry (1.7 s to 2.9 s), its
#: after part (2 s to 3 s).
CANCEL_AT = {"sleep": 2.5, "retry call": 2.8, "after part": 2.5}


def _one(scenario: Scenario, policy: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    calls, requests = assert_same(scenario, policy, replays=False, arrivals=ARRIVALS)
    return calls, requests


def _cancelled_where(calls: pd.DataFrame, where: str, by: str, at: float) -> None:
    """The event engine cancelled p1's attempt where and when the test means it to."""
    mine = calls[calls["provider"] == "p1"]
    start = calls.groupby("request_id")["start_s"].transform("min")
    if where == "sleep":  # one call (its error), never retried: the sleep was cut
        assert mine["sdk_retry"].eq(0).all()
        assert mine["outcome"].eq("error").all()
        return
    last = mine[mine["outcome"] == "cancelled"]
    assert len(last) == len(ARRIVALS)
    assert last["ended_by"].eq(by).all()
    np.testing.assert_allclose(last["end_s"] - start[last.index], at, rtol=1e-12)
    if where == "retry call":
        assert last["sdk_retry"].eq(1).all()
        assert last["ttft_s"].isna().all()
    else:  # billed as served, its first token seen
        assert last["ttft_s"].notna().all()


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("where", list(WHERE))
def test_the_deadline_cancels_a_client_anywhere(where: str, billing: str) -> None:
    scenario = timed(
        {"wait": {"kind": "wait"}}, dict(WHERE[where]), billing=billing, deadline_s=CANCEL_AT[where]
    )
    calls, requests = _one(scenario, "wait")
    assert requests["fail_reason"].eq("deadline").all()
    _cancelled_where(calls, where, "deadline", CANCEL_AT[where])
    if where == "after part":  # the provider finished it: billed in full under every rule
        assert calls["output_tokens"].eq(100).all()


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("where", list(WHERE))
def test_a_race_winner_cancels_a_client_anywhere(where: str, billing: str) -> None:
    """p2 (plain) answers at `CANCEL_AT`, p1's client still at it."""
    p2 = {"serves": {"big": serving(ttft=CANCEL_AT[where] - 1.0)}}
    calls, requests = _one(_raced_with_p2(dict(WHERE[where]), p2, billing), "race")
    assert requests["ok"].all()
    _cancelled_where(calls, where, "loser", CANCEL_AT[where])


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("where", list(WHERE))
def test_a_hedge_winner_cancels_a_client_anywhere(where: str, billing: str) -> None:
    """The hedge fires on p2 at 0.5 s and answers at `CANCEL_AT`."""
    scenario = _hedged(dict(WHERE[where]), CANCEL_AT[where] - 0.5, billing)
    calls, requests = _one(scenario, "hedge")
    assert requests["ok"].all()
    assert calls["attempt"].max() == 1
    _cancelled_where(calls, where, "loser", CANCEL_AT[where])


def _hedged(p1: dict[str, Any], p2_call: float, billing: str) -> Scenario:
    """A hedge after 0.5 s from p1 (its client `p1`) to p2, whose call takes `p2_call` s."""
    data = timed(
        {"hedge": {"kind": "hedge", "after": 0.5, "providers": ["p2"]}}, p1, billing=billing
    ).model_dump(exclude_defaults=True)
    data["providers"]["p2"] = {"serves": {"big": serving(ttft=p2_call - 1.0)}}
    return scenario_from_dict(data)


def test_a_timeout_in_the_after_part_is_the_clients_billed_as_served_and_retried() -> None:
    """The answer is ready at 2 s, seen at 2.5 s; the client's 2.2 s timeout cuts it in the
    after part: a timeout (`ended_by` sdk) billed as served, with its first token, retried."""
    p1 = {
        "serving": serving(ttft=1.0),
        "overhead_s": const(0.5),
        "sdk": {"preset": "openai", "retries": 1, "timeout_s": 2.2},
    }
    calls, requests = _one(timed({"wait": {"kind": "wait"}}, p1, deadline_s=30.0), "wait")
    assert requests["ok"].eq(False).all()  # every try is cut the same way
    assert calls["outcome"].eq("timeout").all()
    assert calls["ended_by"].eq("sdk").all()
    assert calls["output_tokens"].eq(100).all()
    assert calls["ttft_s"].notna().all()
    assert calls["sdk_retry"].tolist() == [0, 1] * len(ARRIVALS)


def test_the_callers_cut_is_never_retried_by_the_client() -> None:
    """A policy cut at 1.5 s over openai's client (which retries its own timeouts): the cut is
    the caller's (`ended_by` attempt), so the client never retries it; the policy does."""
    p1 = {"serving": serving(ttft=1.0), "sdk": "openai", "overhead_s": const(0.1)}
    scenario = timed({"cut": {"kind": "cut", "cutoff": 1.5, "retries": 1}}, p1)
    calls, _ = _one(scenario, "cut")
    assert calls["sdk_retry"].eq(0).all()
    assert calls["ended_by"].eq("attempt").all()
    assert calls["attempt"].tolist() == [0, 1] * len(ARRIVALS)


@pytest.mark.parametrize("honours", [True, False])
def test_a_wait_past_the_policys_cut(honours: bool) -> None:
    """The client cuts at 1.2 s and waits 1 s; the policy cuts at 3 s. Its retry, sent at
    2.2 s, is cut at what is left of the policy's cut (0.8 s, sooner than its own 1.2 s), so at
    3 s, by the policy (`ended_by` attempt): the caller's cut, not retried by the client. The
    policy's retry then does the same from 3 s. Either deadline rule."""
    p1 = {
        "serving": serving(ttft=1.0),
        "sdk": {
            "retries": 2, "timeout_s": 1.2, "retry_on": ["timeout"],
            "backoff": {"base_s": 1.0, "jitter": "none"}, "honours_deadline": honours,
        },
    }  # fmt: skip
    scenario = timed({"cut": {"kind": "cut", "cutoff": 3.0, "retries": 1}}, p1, deadline_s=30.0)
    calls, _ = _one(scenario, "cut")
    first = calls[calls["request_id"] == 0]
    assert first["sdk_retry"].tolist() == [0, 1, 0, 1]
    assert first["ended_by"].tolist() == ["sdk", "attempt", "sdk", "attempt"]
    np.testing.assert_allclose(first["end_s"], [1.2, 3.0, 4.2, 6.0], rtol=1e-12)


@pytest.mark.parametrize("honours", [True, False])
def test_a_wait_that_would_end_past_the_cut_sleeps_to_it_or_gives_up(honours: bool) -> None:
    """The client cuts at 1 s, then waits 2.5 s; the policy cuts at 3 s. Its retry would start
    at 3.5 s, past the cut: an honouring client gives up at 1 s (the policy's retry then), one
    that does not sleeps until the cut at 3 s."""
    p1 = {
        "serving": serving(ttft=1.0),
        "sdk": {
            "retries": 2, "timeout_s": 1.0, "retry_on": ["timeout"],
            "backoff": {"base_s": 2.5, "jitter": "none"}, "honours_deadline": honours,
        },
    }  # fmt: skip
    scenario = timed({"cut": {"kind": "cut", "cutoff": 3.0, "retries": 1}}, p1, deadline_s=30.0)
    calls, _ = _one(scenario, "cut")
    first = calls[calls["request_id"] == 0]
    retry_at = 1.0 if honours else 3.0
    np.testing.assert_allclose(first["start_s"], [0.0, retry_at], rtol=1e-12)
    assert first["sdk_retry"].tolist() == [0, 0]


@pytest.mark.parametrize("honours", [True, False])
def test_a_wait_past_the_deadline(honours: bool) -> None:
    """Every call errors at 1 s, the client waits 5 s, the deadline is at 3 s: an honouring
    client gives up (the run fails with the error at 1 s), one that does not sleeps into the
    deadline's cancellation (the run fails at 3 s)."""
    p1 = dict(SLEEPER, sdk={**SLEEPER["sdk"], "honours_deadline": honours})
    calls, requests = _one(timed({"wait": {"kind": "wait"}}, p1, deadline_s=3.0), "wait")
    assert len(calls) == len(ARRIVALS)
    expected = "error" if honours else "deadline"
    assert requests["fail_reason"].eq(expected).all()


def test_simultaneous_events_only_simpy_can_order_are_replayed() -> None:
    """A zero-length wait inside a call (served exactly at its cut, its after part then cut at
    once) and two racers failing at the same instant with different outcomes: which the event
    engine sees first is its event order, so those requests are replayed on it."""
    p1 = {"serving": serving(ttft=1.0), "overhead_s": const(0.5), "sdk": {"timeout_s": 2.0}}
    scenario = timed({"wait": {"kind": "wait"}}, p1)
    _, _, _, _, replayed = both_engines(scenario, "wait", arrivals=ARRIVALS)
    assert replayed == len(ARRIVALS)
    assert_same(scenario, "wait", arrivals=ARRIVALS)
    tie = {"serving": serving(ttft=2.0, error_rate=ALWAYS), "sdk": {"timeout_s": 3.0}}
    cut = {"serves": {"big": serving(ttft=1.5)}, "sdk": {"timeout_s": 2.0}}
    scenario = _raced_with_p2(tie, cut)
    _, _, _, _, replayed = both_engines(scenario, "race", arrivals=ARRIVALS)
    assert replayed == len(ARRIVALS)
    calls, requests = assert_same(scenario, "race", arrivals=ARRIVALS)
    assert set(calls["outcome"]) == {"error", "timeout"}
    assert requests["ok"].eq(False).all()


def test_a_replay_starts_each_request_where_the_whole_run_did() -> None:
    """Requests 4 and others are replayed (a branch fails as another's call ends); a fresh
    clock reaching request 4's arrival from request 2's would put it one rounding off, and its
    call cut at 1 s would bill 25 tokens by elapsed time instead of 24."""
    p1 = {
        "serves": {
            "m": serving(ttft=0.5, tokens_per_s=50.0),
            "small": serving(ttft=0.5, tokens_per_s=50.0, error_rate=0.5, invalid_rate=0.2),
        }
    }
    scenario = build(
        [step("s1", model="m", required=False, input_tokens=0, output_tokens=28),
         step("s2", model="m", input_tokens=0, output_tokens=26)],
        {"policy": {"kind": "downshift", "cutoff": 1.0, "to": "small"}},
        models={"m": {"price_per_mtok": {"input": 2.5, "output": 10.0}},
                "small": {"price_per_mtok": {"input": 0.15, "output": 0.6}}},
        providers={"p1": p1, "p2": {"serves": {"m": serving(ttft=0.5, tokens_per_s=50.0)}}},
        deadline_s=1e9, billing={"cancelled": "elapsed"},
        arrivals={"kind": "poisson", "rate_per_s": 1.0},
    )  # fmt: skip
    *_, replayed = both_engines(scenario, "policy", n=15, seed=532914547)
    assert replayed > 0
    assert_same(scenario, "policy", n=15, seed=532914547)
    times = np.asarray([0.7, 3.223798852710989, 3.25, 1e6])
    assert 0.7 + (times[1] - 0.7) != times[1]  # from 0.7 a clock misses 3.2237...
    groups = exact_clock_groups(times)
    assert groups[0].tolist() == [0]
    for group in groups:
        now = 0.0
        for at in times[group]:
            now += at - now
            assert now == at


def test_a_deadline_as_two_branches_run_is_replayed() -> None:
    """s1 and s2 end together and unlock s4 and s3 at that instant; the deadline then finds
    the run in the step its last-started branch runs, which only simpy's order of the two
    processes tells (s3 here, later in the event order though earlier in the file)."""
    fast = serving(ttft=0.5, tokens_per_s=50.0)
    scenario = build(
        [step("s1", model="m", required=False, input_tokens=0, output_tokens=1),
         step("s2", model="m", required=False, input_tokens=0, output_tokens=1),
         step("s3", "s1", "s2", model="m", required=False, input_tokens=0, output_tokens=49),
         step("s4", "s1", model="m", required=False, input_tokens=0, output_tokens=1)],
        {"policy": {"kind": "wait"}},
        models={"m": {"price_per_mtok": {"input": 2.5, "output": 10.0}}},
        providers={"p1": {"serves": {"m": fast}}},
        deadline_s=2.0, arrivals={"kind": "poisson", "rate_per_s": 1.0},
    )  # fmt: skip
    *_, replayed = both_engines(scenario, "policy", n=15)
    assert replayed == 15
    _, requests = assert_same(scenario, "policy", n=15)
    assert requests["fail_step"].eq("s3").all()


def _raced_with_p2(p1: dict[str, Any], p2: dict[str, Any], billing: str = "full") -> Scenario:
    """A race of p1 (its client `p1`) and p2 (`p2`: its provider keys)."""
    data = timed(
        {"race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]}}, p1, billing=billing
    ).model_dump(exclude_defaults=True)
    data["providers"]["p2"] = p2
    return scenario_from_dict(data)


# ---------------------------------------------------------------- the engine choice


def default_with_clients() -> Scenario:
    """The bundled default scenario with `sdk: openai` and an `overhead_s` on both providers."""
    data = sim.load_scenario().model_dump(exclude_defaults=True, mode="json")
    for provider in data["providers"].values():
        provider["sdk"] = "openai"
        provider["overhead_s"] = {"median": 0.03, "p99": 0.09}
        provider["overhead_held"] = 0.25
    return scenario_from_dict(data)


def test_what_is_still_not_vectorized_is_refused_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slowdown beside a client is refused by its key; so is a retry_on kind or an overhead
    law the vectorized engine would not know (here: pretended new)."""
    p1 = {"serving": serving(), "sdk": "openai", "overhead_s": lognormal(0.03, 0.09)}
    scenario = timed({"wait": {"kind": "wait"}}, p1)
    policy = compile_scenario(scenario).policies["wait"]
    assert qualify.qualifies(policy) == (True, "")
    data = scenario.model_dump(exclude_defaults=True)
    data["providers"]["p1"]["slowdown"] = {"a": 1.0, "k": 2.0}
    slowed = compile_scenario(scenario_from_dict(data)).policies["wait"]
    assert qualify.qualifies(slowed) == (False, "providers.p1.slowdown is set")
    known = qualify.VECTORIZED_FEATURES - {"client.retry_on.408"}
    assert qualify.qualifies(policy, known) == (False, "providers.p1.sdk.retry_on has '408'")
    monkeypatch.setattr(features, "KNOWN_LAWS", (Constant,))  # the latencies are constant
    assert qualify.qualifies(compile_scenario(scenario).policies["wait"]) == (
        False, "providers.p1.overhead_s uses distribution LogNormal"
    )  # fmt: skip


def test_forcing_the_vectorized_engine_on_a_client_scenario() -> None:
    plan = compile_scenario(default_with_clients())
    policy = build_policy(
        "race", plan.scenario.policies["race"], plan.routes, plan.workflow.steps, {}
    )
    bank = CallDrawBank(Streams(0, "calls"), 50)
    arrivals = np.arange(50.0) * 2
    fast, why = vectorized_tables(plan, policy, bank, arrivals, "vectorized")
    assert fast is not None
    assert why == ""


# ---------------------------------------------------------------- tailsim nines


def nines_scenario() -> Scenario:
    """`scenarios/nines.yaml`-like: a chain with a tail, over clients that retry and time out."""
    return build(
        [step("s1"), step("s2", "s1"), step("s3", "s2")],
        {
            "wait": {"kind": "wait"},
            "cut": {"kind": "cut", "cutoff": 3.0, "retries": 1},
            "race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]},
        },
        providers={
            "p1": {
                "serves": {"big": tail_serving()},
                "sdk": {"preset": "openai", "timeout_s": 4.0},
                "overhead_s": lognormal(0.05, 0.3),
                "overhead_held": 0.5,
            },
            "p2": {"serves": {"big": tail_serving(1.0, 70.0)}, "sdk": "anthropic"},
        },
        deadline_s=14.0,
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
    )


def test_a_nines_batch_reads_the_tilted_draws_alike_on_both_engines() -> None:
    """One batch on a tilted bank (the SDK's retries read their own plain blocks, the overhead
    and the SDK's waits their own streams): the same misses and scores on both engines, and
    the batch ran vectorized."""
    plan = resolved_plan(nines_scenario())
    names = list(plan.policies)
    fast = make_setup(replace(plan, engine="vectorized"), names)
    slow = make_setup(replace(plan, engine="des"), names)
    keys = slot_keys(fast.steps, 3)
    plain = identity_tilt(keys, fast.cuts)
    tilted = Tilt(
        {
            k: SlotTilt((0.8, 0.0, 0.5), s.cut, (s.cut[0] * 2, s.cut[1] * 2))
            for k, s in plain.slots.items()
        }
    )
    tilts, shares = [plain, tilted], [0.3, 0.7]
    bank_fast, out_fast = run_batch(fast, names, 800, 5, tilts, shares)
    bank_slow, out_slow = run_batch(slow, names, 800, 5, tilts, shares)
    np.testing.assert_array_equal(bank_fast.log_weight, bank_slow.log_weight)
    for name in names:
        assert out_fast[name].engine == "vectorized"
        assert out_slow[name].engine == "des"
        np.testing.assert_array_equal(out_fast[name].miss, out_slow[name].miss)
        np.testing.assert_array_equal(out_fast[name].fail, out_slow[name].fail)
        np.testing.assert_allclose(out_fast[name].score, out_slow[name].score, rtol=RTOL)
    assert any(out_fast[name].miss.any() for name in names)


def test_both_engines_read_a_tilted_bank_alike_call_by_call() -> None:
    """On a tilted bank (every slot's first call tilted hard towards slow and failing), the
    vectorized engine's tables are the event engine's: the SDK retries' plain blocks, the
    overhead and the SDK's waits are read alike."""
    plan = compile_scenario(nines_scenario())
    steps = plan.workflow.steps
    slots = {(s.id, a): SlotTilt((1.5, -1.0, 1.0), (0.08, 0.24), (0.3, 0.6)) for s in steps
             for a in range(3)}  # fmt: skip
    for name in ("cut", "race"):
        thresholds = {s.id: 3.0 for s in steps}  # cut's cutoff (race has none)
        policy = build_policy(name, plan.scenario.policies[name], plan.routes, steps, thresholds)
        streams = Streams(4, "main")
        arrivals = arrival_times(plan.arrivals, 300, streams.generator("arrivals"))
        bank = TiltedDrawBank(streams.child("calls"), 300, [Tilt(slots)], [1.0])
        records = Simulation(plan, policy, bank, streams).run(arrivals)
        fast, why = vectorized_tables(plan, policy, bank, arrivals, "vectorized")
        assert fast is not None, why
        pd.testing.assert_frame_equal(fast.requests, requests_frame(records), rtol=RTOL)
        pd.testing.assert_frame_equal(fast.calls, calls_frame(records), rtol=RTOL)
        assert fast.calls["sdk_retry"].gt(0).any()


def test_tailsim_nines_rides_the_vectorized_engine_with_client_rules() -> None:
    plan = compile_scenario(nines_scenario())
    result = estimate_nines(
        plan, target_rel_error=0.5, budget_s=1e6, batch=2_000, pilot=2_000, max_runs=4_000
    )
    assert {e.engine for e in result.estimates.values()} == {"vectorized"}
