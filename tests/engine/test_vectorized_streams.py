"""The vectorized engine against the event engine on the stream features (issue 26, item 5).

A stall's place (`stall.where`: mid_stream, before_first_token, a share of each), a mid-stream
break (`mid_stream_error_rate`) and the cuts that watch the stream (`first_token_timeout_s`,
`idle_timeout_s`) are per-call rules, so where nothing is shared the vectorized engine runs
them and must give the event engine's tables on the same arrivals and draws: every column of
every call equal to the last bit (ttft_s, tokens_streamed, cost, outcome, ended_by, end), and
every column of every request too but `cost_usd`, a sum of the calls' costs that the engines
add in another order (race and hedge: the order calls end), within rtol 1e-12 as in
tests/engine/test_vectorized.py. On a chain with retries, a `cutoff` (seconds and pNN), a
deadline that cuts runs, every policy and every `billing.cancelled`, with and without the
providers' client rules; the scenario is checked to exercise what it should (broken answers,
stalls before the first token, calls cut during a stall).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.analysis.metrics import calls_frame
from sim.engine import qualify
from sim.engine.choice import single_policy, vectorized_tables
from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.config import Scenario
from sim.model.scenario import scenario_from_dict
from sim.model.streams import Streams
from sim.plan import compile_scenario
from sim.rare.tilt import SlotTilt, Tilt, TiltedDrawBank
from tests.engine.test_vectorized import POLICIES, both_engines, tail_serving
from tests.helpers import build, resolved_plan, step

RTOL = 1e-12
WHERE: dict[str, Any] = {
    "mid": "mid_stream",
    "before": "before_first_token",
    "share": {"before_first_token": 0.4},
}


def assert_equal(scenario: Scenario, policy: str, n: int = 200, seed: int = 0) -> pd.DataFrame:
    """Both engines' calls equal to the last bit, their requests too (but `cost_usd`, within
    rtol 1e-12: the same calls' costs summed in another order); returns the event engine's
    calls."""
    (des_requests, des_calls), (vec_requests, vec_calls) = both_engines(
        scenario, policy, n=n, seed=seed
    )
    pd.testing.assert_frame_equal(vec_calls, des_calls, check_exact=True)
    exact = [c for c in des_requests.columns if c != "cost_usd"]
    pd.testing.assert_frame_equal(vec_requests[exact], des_requests[exact], check_exact=True)
    np.testing.assert_allclose(vec_requests["cost_usd"], des_requests["cost_usd"], rtol=RTOL)
    return des_calls


def stream_serving(
    where: Any, break_rate: float, ttft: float = 0.8, speed: float = 80.0
) -> dict[str, Any]:
    """`tail_serving` (heavy tails, 12% errors, 12% junk) with stalls on 30% of calls placed by
    `where` and `break_rate` of the answers breaking mid-stream."""
    spec = tail_serving(ttft, speed, mid_stream_error_rate=break_rate)
    spec["stall"] = {"probability": 0.3, "extra_s": {"median": 6.0, "p99": 25.0}, "where": where}
    return spec


def stream_scenario(
    where: Any,
    break_rate: float = 0.2,
    billing: str = "elapsed",
    policies: dict[str, Any] | None = None,
    deadline_s: float = 10.0,
) -> Scenario:
    """Three chained steps on two providers whose calls stall (placed by `where`) and break."""
    providers = {
        "p1": {
            "serves": {
                "big": stream_serving(where, break_rate),
                "small": stream_serving(where, break_rate, 0.3, 200.0),
            }
        },
        "p2": {
            "serves": {
                "big": stream_serving(where, break_rate, 1.0, 70.0),
                "small": stream_serving(where, break_rate, 0.4, 180.0),
            }
        },
    }
    return build(
        [step("s1"), step("s2", "s1"), step("s3", "s2")],
        policies or POLICIES,
        providers=providers,
        deadline_s=deadline_s,
        billing={"cancelled": billing},
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
    )


# ---------------------------------------------------------------- a stall's place, a break


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_agrees_on_placed_stalls_and_breaks(policy: str, where: str) -> None:
    calls = assert_equal(stream_scenario(WHERE[where]), policy)
    assert {"ok", "error", "invalid", "broken"} <= set(calls["outcome"])
    broken = calls[calls["outcome"] == "broken"]
    assert (broken["tokens_streamed"] < broken["output_tokens"] + 1).all()
    assert broken["ttft_s"].notna().all()


@pytest.mark.parametrize("billing", ["full", "none"])
@pytest.mark.parametrize("policy", ["wait_timeout", "cut_percentile", "race_full", "hedge_seconds"])
def test_the_other_billing_rules_agree(policy: str, billing: str) -> None:
    for where in WHERE.values():
        assert_equal(stream_scenario(where, billing=billing), policy)


def test_several_seeds_and_deadlines() -> None:
    for seed in (1, 2, 3):
        for deadline in (4.0, 30.0):
            scenario = stream_scenario(WHERE["share"], deadline_s=deadline)
            for policy in ("wait", "cut_seconds", "race", "downshift"):
                assert_equal(scenario, policy, n=150, seed=seed)


def test_a_stall_before_the_first_token_delays_it_in_both_engines() -> None:
    """The same draws with every stall before the first token instead of mid-stream (no
    cuts, no deadline: the same calls): a stalled call's first token comes its stall later
    and an answer ends when it did (up to rounding: the sum's order differs; an error, at
    its first token, ends later, and so do the calls after it); 30% of calls stall
    (within 4 standard errors, sqrt(0.3 x 0.7 / calls), a false alarm once in 16 000)."""
    policies = {"wait": {"kind": "wait", "retries": 2}}
    mid, before = (
        assert_equal(stream_scenario(w, 0.0, policies=policies, deadline_s=1e6), "wait")
        for w in ("mid_stream", "before_first_token")
    )
    assert len(mid) == len(before)
    served = mid["ttft_s"].notna().to_numpy()
    delay = (before["ttft_s"] - mid["ttft_s"]).to_numpy()[served]
    assert (delay >= 0).all()
    share = (delay > 0).mean()
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / len(delay)), share
    # the first calls (sent at arrival in both) that answer end when they did
    first = ((mid["step"] == "s1") & (mid["attempt"] == 0) & (mid["outcome"] == "ok")).to_numpy()
    np.testing.assert_allclose(before["end_s"][first], mid["end_s"][first], rtol=RTOL)


def test_elapsed_billing_of_calls_cut_during_a_mid_stream_stall() -> None:
    """A `cutoff` of 3 s cuts many calls inside a mid-stream stall: both engines bill what
    streamed before its onset, and broken calls what streamed before the break."""
    calls = assert_equal(stream_scenario("mid_stream"), "cut_seconds")
    cut = calls[calls["outcome"] == "timeout"]
    assert (cut["tokens_streamed"] > 0).any()
    assert (cut["output_tokens"] == cut["tokens_streamed"]).all()  # elapsed: billed as streamed
    broken = calls[calls["outcome"] == "broken"]
    assert (broken["output_tokens"] == broken["tokens_streamed"]).all()


def client_scenario(where: Any, billing: str) -> Scenario:
    """`stream_scenario` with client rules: openai's SDK with a 4 s timeout and overhead on p1,
    anthropic's with two retries on p2."""
    data = stream_scenario(where, billing=billing).model_dump(exclude_defaults=True)
    data["providers"]["p1"] |= {
        "sdk": {"preset": "openai", "timeout_s": 4.0},
        "overhead_s": {"median": 0.05, "p99": 0.4},
        "overhead_held": 0.5,
    }
    data["providers"]["p2"] |= {"sdk": {"preset": "anthropic", "retries": 2}}
    return scenario_from_dict(data)


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_client_rules_with_placed_stalls_and_breaks(policy: str, billing: str) -> None:
    """A broken answer is not retried by the client (it is no 5xx); its break comes after the
    held overhead's share."""
    calls = assert_equal(client_scenario(WHERE["share"], billing), policy)
    assert {"broken", "ok"} <= set(calls["outcome"])
    if policy == "wait":  # no cut of its own: the client's 4 s timeout cuts calls
        assert (calls["ended_by"] == "sdk").any()


def test_placed_stalls_and_breaks_now_qualify() -> None:
    """`stall.where` and `mid_stream_error_rate` are implemented: a policy using them runs on
    the vectorized engine."""
    for feature in ("stream.stall_where", "stream.mid_stream_error"):
        assert feature in qualify.VECTORIZED_FEATURES
    policy = compile_scenario(stream_scenario(WHERE["share"])).policies["wait"]
    assert {"stream.stall_where", "stream.mid_stream_error"} <= {f.name for f in policy.features}
    assert qualify.qualifies(policy) == (True, "")


# ---------------------------------------------------------------- the cuts that watch the stream

#: The stream cuts on every policy kind that takes them: seconds, pNN and K x pNN first-token
#: thresholds (from the pilot, as `cutoff`), idle timeouts, each with the policy's own cut or not.
CUT_POLICIES: dict[str, dict[str, Any]] = {
    "wait_first": {"kind": "wait", "retries": 2, "first_token_timeout_s": 2.0},
    "wait_idle": {"kind": "wait", "retries": 2, "idle_timeout_s": 3.0, "providers": ["p1", "p2"]},
    "wait_both": {
        "kind": "wait", "timeout_s": 8.0, "retries": 2, "first_token_timeout_s": "p80",
        "idle_timeout_s": 2.0,
    },
    "cut_both": {
        "kind": "cut", "cutoff": "p90", "retries": 1, "first_token_timeout_s": "2 x p50",
        "idle_timeout_s": 4.0,
    },
    "race_both": {
        "kind": "race", "attempts": 2, "retries": 1, "timeout_s": 6.0,
        "first_token_timeout_s": 1.5, "idle_timeout_s": 2.5,
    },
    "downshift_both": {
        "kind": "downshift", "cutoff": "p85", "to": "small", "retries": 2,
        "first_token_timeout_s": "p70", "idle_timeout_s": 1.0,
    },
}  # fmt: skip


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize("policy", list(CUT_POLICIES))
def test_the_stream_cuts_agree(policy: str, where: str, billing: str) -> None:
    """Cut at the first token's timeout or at a stall's onset + the idle timeout, labelled,
    billed per `billing.cancelled` and retried as a cut, on calls that also break."""
    calls = assert_equal(
        stream_scenario(WHERE[where], billing=billing, policies=CUT_POLICIES), policy
    )
    assert (calls["ended_by"] == "first_token").any() or policy == "wait_idle"
    if where != "before" and policy != "wait_first":
        assert (calls["ended_by"] == "idle").any()
    cut = calls[calls["ended_by"].isin(["first_token", "idle"])]
    assert (cut["outcome"] == "timeout").all()
    if len(cut):  # a cut call is retried (or falls back) as a cut is: a next attempt follows
        keys = cut[["request_id", "step"]].assign(attempt=cut["attempt"] + 1)
        assert len(calls.merge(keys)) > 0


def test_an_idle_cut_bills_the_tokens_before_the_onset_in_both_engines() -> None:
    """Under `elapsed` an idle cut bills exactly what streamed before its stall's onset (no
    token during the stall): its billed output is its tokens streamed, never its whole answer."""
    calls = assert_equal(stream_scenario("mid_stream", policies=CUT_POLICIES), "wait_idle")
    idle = calls[calls["ended_by"] == "idle"]
    assert len(idle) > 0
    assert (idle["output_tokens"] == idle["tokens_streamed"]).all()
    assert (idle["tokens_streamed"] < 100).all()


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", list(CUT_POLICIES))
def test_the_stream_cuts_agree_under_client_rules(policy: str, billing: str) -> None:
    """With the SDK's timeout, retries and overhead: a stream cut is the caller's, so the
    client never retries it; its first-token clock includes the held overhead."""
    data = client_scenario(WHERE["share"], billing).model_dump(exclude_defaults=True)
    data["policies"] = CUT_POLICIES
    calls = assert_equal(scenario_from_dict(data), policy)
    cut = calls[calls["ended_by"].isin(["first_token", "idle"])]
    assert len(cut) > 0
    again = cut[["request_id", "step", "attempt"]].assign(sdk_retry=cut["sdk_retry"] + 1)
    assert len(calls.merge(again)) == 0  # no SDK retry after a stream cut
    assert (calls["sdk_retry"] > 0).any()  # though the client does retry its own failures


def test_several_seeds_with_stream_cuts() -> None:
    for seed in (1, 2, 3):
        for deadline in (4.0, 30.0):
            scenario = stream_scenario(WHERE["share"], deadline_s=deadline, policies=CUT_POLICIES)
            for policy in ("wait_both", "cut_both", "race_both", "downshift_both"):
                assert_equal(scenario, policy, n=150, seed=seed)


def test_the_stream_cuts_now_qualify() -> None:
    for feature in ("stream.first_token_timeout", "stream.idle_timeout"):
        assert feature in qualify.VECTORIZED_FEATURES
    plan = compile_scenario(stream_scenario(WHERE["share"], policies=CUT_POLICIES))
    for name in CUT_POLICIES:
        assert qualify.qualifies(plan.policies[name]) == (True, ""), name


# ---------------------------------------------------------------- a streaming step's read timeout


def read_timeout_scenario(where: Any, billing: str, break_rate: float = 0.2) -> Scenario:
    """`client_scenario` with a 2.5 s timeout on p2's client too, and steps s1 and s3 streaming
    (`stream: true`): there the client's timeout is its read timeout, a first-token cut and an
    idle cut, not a total one; every policy, with and without stream cuts of its own."""
    data = client_scenario(where, billing).model_dump(exclude_defaults=True)
    data["policies"] = POLICIES | CUT_POLICIES
    data["providers"]["p2"]["sdk"]["timeout_s"] = 2.5
    for provider in data["providers"].values():
        for serving in provider["serves"].values():
            serving["mid_stream_error_rate"] = break_rate
    for spec in data["workflow"]["steps"][::2]:
        spec["stream"] = True
    return scenario_from_dict(data)


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", [*POLICIES, *CUT_POLICIES])
def test_a_streaming_steps_read_timeout_agrees(policy: str, billing: str) -> None:
    """On the streaming steps the client's timeout cuts a call with no first token (`ended_by`
    sdk, retried by the client) or silent mid-stream (`ended_by` idle, not retried); on s2 it
    is a total cut as before."""
    calls = assert_equal(read_timeout_scenario(WHERE["share"], billing), policy)
    idle = calls[calls["ended_by"] == "idle"]
    again = idle[["request_id", "step", "attempt"]].assign(sdk_retry=idle["sdk_retry"] + 1)
    assert len(calls.merge(again)) == 0  # an idle cut is never retried by the client
    if policy == "wait":  # no cut of its own: the client's read timeout makes both cuts
        streaming = calls[calls["step"].isin(["s1", "s3"])]
        assert (streaming["ended_by"] == "idle").any()
        first = streaming[streaming["ended_by"] == "sdk"]
        assert len(first) > 0
        assert first["ttft_s"].isna().all()
        assert (streaming["sdk_retry"] > 0).any()  # ... and retries the first-token ones
        total = calls[(calls["step"] == "s2") & (calls["ended_by"] == "sdk")]
        assert len(total) > 0  # on s2, not streaming, the timeout still bounds the whole call


def test_a_streaming_step_with_mid_stream_stalls_and_no_breaks() -> None:
    for where in WHERE.values():
        for policy in ("wait", "race_full", "hedge_seconds", "wait_both"):
            assert_equal(read_timeout_scenario(where, "elapsed", 0.0), policy, seed=4)


def test_a_streaming_step_now_qualifies() -> None:
    assert "step.stream" in qualify.VECTORIZED_FEATURES
    plan = compile_scenario(read_timeout_scenario(WHERE["share"], "elapsed"))
    for name in plan.policies:
        assert qualify.qualifies(plan.policies[name]) == (True, ""), name


def test_both_engines_read_a_tilted_bank_alike_with_the_stream_features() -> None:
    """On a tilted bank (`tailsim nines`: every slot's first call tilted towards slow and
    failing) the stream's own streams (a stall's place, a break and where) are read alike:
    the calls equal to the last bit, on a client's provider and a plain one."""
    scenario = read_timeout_scenario(WHERE["share"], "elapsed")
    plan = resolved_plan(scenario, 0)
    slots = {
        (s.id, a): SlotTilt((1.5, -1.0, 1.0), (0.08, 0.24), (0.3, 0.6))
        for s in plan.workflow.steps
        for a in range(3)
    }
    for name in ("wait", "race_full", "cut_both", "downshift_both"):
        policy = single_policy(plan.runtime(name))
        streams = Streams(4, "main")
        arrivals = arrival_times(plan.arrivals, 300, streams.generator("arrivals"))
        bank = TiltedDrawBank(streams.child("calls"), 300, [Tilt(slots)], [1.0])
        records = Simulation(plan, policy, bank, streams).run(arrivals)
        fast, why = vectorized_tables(plan, policy, bank, arrivals, "vectorized")
        assert fast is not None, why
        pd.testing.assert_frame_equal(fast.calls, calls_frame(records), check_exact=True)
        assert {"broken", "timeout"} <= set(fast.calls["outcome"])
