"""The vectorized engine against the event engine, request by request and call by call.

Both engines run the same policy on the same arrivals and the same `CallDrawBank`, so on a
scenario where nothing is shared they must give the same tables: every column of every request
(latency, ok, cost, tokens, calls, end, fail_reason, fail_step) and of every call, up to float
rounding (rtol 1e-12). Constant latencies make the ties exact: a call ending at the deadline, at
its cutoff, two racers ending together, a hedge timer firing as the primary ends. Then what
qualifies and the limits replayed on the calls; the engine choice of whole runs (auto, the
fallback, forcing, the CLI's option) is in tests/integration/test_vectorized.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine import qualify
from sim.engine.choice import single_policy, vectorized_tables
from sim.engine.simulation import Simulation
from sim.engine.vector_calls import UnsupportedError
from sim.engine.vector_tables import tables
from sim.engine.vectorized import VectorizedSimulation, simulate
from sim.model.arrivals import arrival_times
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.ratelimit import Quota
from sim.model.scenario import scenario_from_dict
from sim.model.streams import CallDrawBank, Streams
from sim.plan import PolicyPlan, compile_scenario, features
from sim.policy.build import build_policy
from sim.policy.kinds.sequential import Sequential
from tests.helpers import build, resolved_plan, serving, step

RTOL = 1e-12
EXACT_REQUEST_COLUMNS = [
    "request_id",
    "resend",
    "ok",
    "tokens",
    "calls",
    "fail_reason",
    "fail_step",
]
CLOSE_REQUEST_COLUMNS = ["arrival_s", "latency_s", "cost_usd", "end_s"]


def both_engines(
    scenario: Scenario,
    policy: str,
    n: int = 200,
    arrivals: Sequence[float] | None = None,
    seed: int = 0,
) -> tuple[tuple[pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]]:
    """((requests, calls) of the event engine, (requests, calls) of the vectorized one)."""
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
    runs, calls = simulate(plan, runtime, bank, times)
    fast = tables(plan, policy, runs, calls)
    return (requests_frame(records), calls_frame(records)), (fast.requests, fast.calls)


def assert_same(scenario: Scenario, policy: str, **kwargs: Any) -> pd.DataFrame:
    """Both engines agree per request and per call; returns the calls (with the requests'
    `fail_reason` as `run_fail_reason`)."""
    (des_requests, des_calls), (vec_requests, vec_calls) = both_engines(scenario, policy, **kwargs)
    assert len(vec_requests) == len(des_requests)
    for column in EXACT_REQUEST_COLUMNS:
        assert vec_requests[column].tolist() == des_requests[column].tolist(), column
    for column in CLOSE_REQUEST_COLUMNS:
        np.testing.assert_allclose(
            vec_requests[column].to_numpy(float),
            des_requests[column].to_numpy(float),
            rtol=RTOL,
            err_msg=column,
        )
    pd.testing.assert_frame_equal(vec_requests, des_requests, check_exact=False, rtol=RTOL)
    pd.testing.assert_frame_equal(vec_calls, des_calls, check_exact=False, rtol=RTOL)
    return des_calls.assign(
        run_fail_reason=des_calls["request_id"].map(des_requests["fail_reason"])
    )


def lognormal(median: float, p99: float) -> dict[str, float]:
    return {"median": median, "p99": p99}


def tail_serving(ttft: float = 0.8, speed: float = 80.0, **extra: Any) -> dict[str, Any]:
    """A heavy-tailed serving spec with stalls, hard errors and junk answers."""
    return {
        "ttft_s": lognormal(ttft, ttft * 6),
        "tokens_per_s": lognormal(speed, speed * 2),
        "stall": {"probability": 0.08, "extra_s": lognormal(6.0, 25.0)},
        "error_rate": 0.12,
        "invalid_rate": 0.12,
        **extra,
    }


POLICIES: dict[str, dict[str, Any]] = {
    "wait": {"kind": "wait"},
    "wait_timeout": {"kind": "wait", "timeout_s": 4.0, "retries": 2, "providers": ["p1", "p2"]},
    "cut_seconds": {"kind": "cut", "cutoff": 3.0, "retries": 2},
    "cut_percentile": {"kind": "cut", "cutoff": "p80", "retries": 1, "providers": ["p2", "p1"]},
    "race": {"kind": "race", "attempts": 2},
    "race_full": {
        "kind": "race",
        "attempts": 3,
        "retries": 1,
        "timeout_s": 5.0,
        "providers": ["p1", "p2"],
    },
    "hedge_seconds": {"kind": "hedge", "after": 2.0, "hedges": 2, "providers": ["p2", "p1"]},
    "hedge_percentile": {"kind": "hedge", "after": "p70"},
    "downshift": {"kind": "downshift", "cutoff": "p85", "to": "small", "retries": 2},
    "downshift_routed": {
        "kind": "downshift",
        "cutoff": 2.5,
        "to": "small",
        "providers": ["p2", "p1"],
    },
}


def tail_scenario(
    steps: Sequence[dict[str, Any]] | None = None, deadline_s: float = 10.0, billing: str = "full"
) -> Scenario:
    """Three steps on two heavy-tailed providers, a deadline that cuts some runs."""
    providers = {
        "p1": {"serves": {"big": tail_serving(), "small": tail_serving(0.3, 200.0)}},
        "p2": {"serves": {"big": tail_serving(1.0, 70.0), "small": tail_serving(0.4, 180.0)}},
    }
    return build(
        steps or [step("s1"), step("s2", "s1"), step("s3", "s2")],
        POLICIES,
        providers=providers,
        deadline_s=deadline_s,
        billing={"cancelled": billing},
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
    )


# ---------------------------------------------------------------- every policy, every billing


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_agrees_per_request_and_per_call(policy: str, billing: str) -> None:
    scenario = tail_scenario(billing=billing)
    calls = assert_same(scenario, policy)
    # the scenario exercises what it should: failures, and runs failed by the deadline
    assert {"ok", "error", "invalid"} <= set(calls["outcome"])
    assert calls["run_fail_reason"].eq("deadline").any()


def hard_tail_scenario(billing: str = "full", deadline_s: float = 10.0) -> Scenario:
    """`tail_scenario` (its last step on small) with 30% of requests hard: more junk on both
    models and longer answers (x2.5 on small, x1.3 on big)."""
    steps = [step("s1"), step("s2", "s1"), step("s3", "s2", model="small")]
    data = tail_scenario(steps, deadline_s=deadline_s, billing=billing).model_dump(
        exclude_defaults=True
    )
    data["hardness"] = {"share": 0.3}
    data["models"]["small"]["when_hard"] = {"invalid_rate": 0.6, "length": 2.5}
    data["models"]["big"]["when_hard"] = {"invalid_rate": 0.2, "length": 1.3}
    return scenario_from_dict(data)


@pytest.mark.parametrize("billing", ["full", "elapsed", "none"])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_every_policy_agrees_with_hard_requests(policy: str, billing: str) -> None:
    """Hard requests' junk (from each call's own outcome uniform) and longer answers (their
    generation time, billed and charged tokens) the same in both engines, per request and call."""
    calls = assert_same(hard_tail_scenario(billing), policy)
    lengths = {100, 250, 130}  # easy; hard on small (x2.5); hard on big (x1.3)
    charged = set(calls["quota_tokens"] - 1000)
    assert lengths <= charged, charged  # hard answers were made, on both models
    assert {"ok", "error", "invalid"} <= set(calls["outcome"])


def test_dag_branches_with_optional_steps_and_early_failures() -> None:
    """Two branches, optional steps (one with a required step after it), a join: a required
    failure in one branch cancels the other branch's call in flight, billed per the rule."""
    steps = [
        step("a"),
        step("b", "a", required=False),
        step("c", "a"),
        step("d", "b", required=False),
        step("e", "c"),
        step("f", "c", "d"),
        step("g", "e", required=False),
    ]
    reasons: set[str] = set()
    for billing in ("full", "elapsed", "none"):
        scenario = tail_scenario(steps, deadline_s=25.0, billing=billing)
        for policy in ("wait", "wait_timeout", "race_full", "hedge_seconds", "cut_seconds"):
            reasons |= set(assert_same(scenario, policy, n=300)["run_fail_reason"])
    assert {"error", "invalid", "deadline"} <= reasons


def test_loose_and_tight_deadlines() -> None:
    for deadline in (3.0, 8.0, 1e6):
        scenario = tail_scenario(deadline_s=deadline, billing="elapsed")
        for policy in ("wait", "race_full", "hedge_seconds", "downshift"):
            assert_same(scenario, policy, n=150)


# ---------------------------------------------------------------- exact ties (constant latencies)


def exact(
    policies: dict[str, Any], steps: Sequence[dict[str, Any]] | None = None, **overrides: Any
) -> Scenario:
    """Constant latencies: a call takes 1 s to first token + 100 tokens at 100 tok/s = 2 s."""
    return build(steps or [step("s1"), step("s2", "s1")], policies, **overrides)


ARRIVALS = (0.0, 1.0, 2.5, 7.0)


def test_a_call_ending_exactly_at_the_deadline_is_cancelled() -> None:
    scenario = exact({"wait": {"kind": "wait"}}, deadline_s=4.0, billing={"cancelled": "elapsed"})
    calls = assert_same(scenario, "wait", arrivals=ARRIVALS)
    assert calls.loc[calls["step"] == "s2", "outcome"].eq("cancelled").all()


def test_a_call_ending_exactly_at_its_cutoff_completes() -> None:
    scenario = exact({"cut": {"kind": "cut", "cutoff": 2.0, "retries": 1}})
    calls = assert_same(scenario, "cut", arrivals=ARRIVALS)
    assert calls["outcome"].eq("ok").all()


def test_a_cutoff_below_the_call_cuts_every_attempt() -> None:
    scenario = exact({"cut": {"kind": "cut", "cutoff": 1.5, "retries": 2}}, deadline_s=20.0)
    calls = assert_same(scenario, "cut", arrivals=ARRIVALS)
    assert calls["outcome"].eq("timeout").all()


def test_race_attempts_ending_together_both_complete() -> None:
    scenario = exact({"race": {"kind": "race", "attempts": 3, "providers": ["p1", "p2"]}})
    calls = assert_same(scenario, "race", arrivals=ARRIVALS)
    assert calls["outcome"].eq("ok").all()


def test_race_loser_cancelled_by_a_faster_provider() -> None:
    providers = {
        "p1": {"serves": {"big": serving(ttft=3.0), "small": serving()}},
        "p2": {"serves": {"big": serving(ttft=1.0), "small": serving()}},
    }
    for billing in ("full", "elapsed", "none"):
        scenario = exact(
            {"race": {"kind": "race", "attempts": 2, "providers": ["p1", "p2"]}},
            providers=providers,
            billing={"cancelled": billing},
        )
        calls = assert_same(scenario, "race", arrivals=ARRIVALS)
        assert calls["outcome"].value_counts().to_dict() == {"ok": 8, "cancelled": 8}


def test_hedge_timer_firing_as_the_primary_ends_fires_nothing() -> None:
    scenario = exact({"hedge": {"kind": "hedge", "after": 2.0}})
    calls = assert_same(scenario, "hedge", arrivals=ARRIVALS)
    assert calls["attempt"].eq(0).all()


def test_hedge_fires_after_the_delay_and_at_once_on_a_failure() -> None:
    providers = {
        "p1": {"serves": {"big": serving(ttft=1.0, error_rate=0.5), "small": serving()}},
        "p2": {"serves": {"big": serving(ttft=0.5), "small": serving()}},
    }
    scenario = exact(
        {"hedge": {"kind": "hedge", "after": 1.5, "hedges": 2, "providers": ["p1", "p2"]}},
        providers=providers,
    )
    calls = assert_same(scenario, "hedge", n=60)
    assert calls["attempt"].max() == 2


def test_retries_with_errors_and_a_branch_failing_the_run() -> None:
    """Root `a` errors often; root `b` is slow: when `a` fails the run, `b` is cancelled."""
    providers = {
        "p1": {"serves": {"big": serving(ttft=1.0, error_rate=0.6), "small": serving()}},
        "p2": {"serves": {"big": serving(ttft=9.0), "small": serving()}},
    }
    steps = [step("a"), step("b", provider="p2"), step("c", "a", "b")]
    for billing in ("full", "elapsed", "none"):
        scenario = exact(
            {"wait": {"kind": "wait", "retries": 1}},
            steps,
            providers=providers,
            billing={"cancelled": billing},
        )
        calls = assert_same(scenario, "wait", n=60)
        assert calls["outcome"].eq("cancelled").any()


def test_a_timeout_at_the_give_up_instant_is_cut_unserved() -> None:
    scenario = exact({"wait": {"kind": "wait", "timeout_s": 1e-13, "retries": 1}})
    calls = assert_same(scenario, "wait", arrivals=ARRIVALS)
    assert calls["outcome"].eq("timeout").all()
    assert calls["cost_usd"].eq(0).all()


# ---------------------------------------------------------------- qualification


def policy_of(scenario: Scenario, name: str) -> Any:
    plan = compile_scenario(scenario)
    steps = plan.workflow.steps
    return build_policy(
        name, scenario.policies[name], plan.routes, steps, {s.id: 1.0 for s in steps}
    )


def features_of(scenario: Scenario, name: str) -> PolicyPlan:
    """The compiled policy `name` (its features are what `qualify` checks)."""
    return compile_scenario(scenario).policies[name]


def test_customer_resends_do_not_qualify() -> None:
    scenario = exact(
        {"wait": {"kind": "wait"}}, customers={"retry": {"probability": 0.5, "max": 1}}
    )
    usable, reason = qualify.qualifies(features_of(scenario, "wait"))
    assert not usable
    assert "customers.retry" in reason
    quiet = exact({"wait": {"kind": "wait"}}, customers={"retry": {"probability": 0.5, "max": 0}})
    assert qualify.qualifies(features_of(quiet, "wait"))[0]


def test_an_unclassified_field_set_falls_back_and_at_its_default_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field no engine was told about (here: pretend `timeout_s` is new, missing from the
    compiler's table) must be at its default for the run to qualify."""
    table = dict(features.FIELD_FEATURES)
    wait_type = type(exact({"w": {"kind": "wait"}}).policies["w"])
    del table[(wait_type, "timeout_s")]
    monkeypatch.setattr(features, "FIELD_FEATURES", table)
    plain = exact({"w": {"kind": "wait"}})
    assert qualify.qualifies(features_of(plain, "w")) == (True, "")
    timed = exact({"w": {"kind": "wait", "timeout_s": 3.0}})
    assert qualify.qualifies(features_of(timed, "w")) == (False, "policies.w.timeout_s is set")


def test_a_feature_the_engine_lists_qualifies_and_one_it_lacks_does_not() -> None:
    """The choice is the policy's features against the engine's list: a feature is refused
    until the engine names it."""
    scenario = exact({"wait": {"kind": "wait", "backoff": {"base_s": 1.0}}})
    policy = features_of(scenario, "wait")
    assert [f.name for f in policy.features] == ["policy.backoff"]
    assert qualify.qualifies(policy) == (False, "policies.wait.backoff is set")
    assert qualify.qualifies(policy, frozenset({"policy.backoff"})) == (True, "")


def test_an_unknown_policy_class_does_not_run_vectorized() -> None:
    class Validated(Sequential):
        pass

    scenario = exact({"wait": {"kind": "wait"}})
    base = policy_of(scenario, "wait")
    bank = CallDrawBank(Streams(0, "x"), 1)
    with pytest.raises(UnsupportedError, match="Validated"):
        VectorizedSimulation(compile_scenario(scenario), Validated(base.name, base.plans), bank)


def test_the_quota_check_agrees_with_replaying_the_buckets() -> None:
    """On random call sequences, the closed-form check says "never refuses" only if replaying
    `sim.model.ratelimit.Quota` admits every call, and it is rarely more careful than that (only
    within its rounding margin of an empty bucket)."""
    rng = np.random.default_rng(5)
    stricter = 0
    for _ in range(300):
        count = int(rng.integers(1, 60))
        times = np.sort(rng.uniform(0, 120, count)).round(int(rng.integers(0, 3)))
        tokens = rng.integers(1, 5000, count).astype(float)
        per_minute = int(rng.integers(5000, 60000))
        quota = Quota(per_minute, None)
        admitted = all(quota.admit(float(t), int(k)) for t, k in zip(times, tokens, strict=True))
        short = qualify._bucket_runs_short(times, tokens, per_minute)
        assert admitted or short
        stricter += admitted and short
    assert stricter <= 6


def test_peak_in_service_counts_touching_calls_as_overlapping() -> None:
    assert qualify._peak_in_service(np.array([0.0, 2.0]), np.array([2.0, 3.0])) == 2
    assert qualify._peak_in_service(np.array([0.0, 2.5]), np.array([2.0, 3.0])) == 1


def test_unknown_engine_is_an_error() -> None:
    scenario = exact({"wait": {"kind": "wait"}})
    bank = CallDrawBank(Streams(0, "x"), 1)
    with pytest.raises(ScenarioError, match="engine"):
        vectorized_tables(
            compile_scenario(scenario), policy_of(scenario, "wait"), bank, np.zeros(1), "turbo"
        )


def test_branches_cut_at_the_same_instant_follow_the_event_order() -> None:
    """Two roots cut by the same timeout at the same instant, one required: which of the two
    events comes first is simpy's order, so such requests are replayed by the event engine."""
    steps = [step("a"), step("b", required=False), step("c", "a", "b")]
    for billing in ("full", "elapsed"):
        scenario = exact(
            {"wait": {"kind": "wait", "timeout_s": 1.0}}, steps, billing={"cancelled": billing}
        )
        calls = assert_same(scenario, "wait", arrivals=ARRIVALS)
        assert calls["outcome"].tolist() == ["timeout", "cancelled"] * len(ARRIVALS)


def test_a_call_slot_few_requests_need_draws_only_their_rows_of_the_bank_block() -> None:
    """Few rows jump the slot's stream to each row: exactly the bank's uniforms for them (the
    first rows, inner ones, the last); many rows take the bank's block itself."""
    scenario = tail_scenario()
    plan = resolved_plan(scenario, 0)
    runtime = single_policy(plan.runtime("wait"))
    n = 5000
    bank = CallDrawBank(Streams(3, "main").child("calls"), n)
    engine = VectorizedSimulation(plan, runtime, bank)
    for rows in ([0, 1, 2, 17, 4000, n - 1], [1], [3, 4], [n - 1]):
        few = engine._uniforms("s2", 1, np.asarray(rows))
        np.testing.assert_array_equal(few, bank.uniforms("s2", 1, 0)[rows])
    assert engine._uniforms("s2", 1, np.arange(0, n, 2)) is bank.uniforms("s2", 1, 0)


@pytest.mark.parametrize("policy", ["wait", "race", "hedge_percentile"])
def test_engines_agree_on_truncated_lognormals(policy: str) -> None:
    """A `max` on first token, speed and stall (truncated lognormals) is drawn alike by both
    engines (the vectorized one takes them as it takes a plain lognormal, not by fallback)."""
    serving = tail_serving()
    serving["ttft_s"] = {**serving["ttft_s"], "max": 1.5}
    serving["tokens_per_s"] = {**serving["tokens_per_s"], "max": 120.0}
    serving["stall"]["extra_s"] = {**serving["stall"]["extra_s"], "max": 9.0}
    providers = {"p1": {"serves": {"big": serving, "small": tail_serving(0.3, 200.0)}}}
    providers["p2"] = providers["p1"]
    scenario = build(
        [step("s1"), step("s2", "s1")],
        POLICIES,
        providers=providers,
        deadline_s=10.0,
        arrivals={"kind": "poisson", "rate_per_s": 2.0},
    )
    assert qualify.qualifies(features_of(scenario, policy))[0]
    calls = assert_same(scenario, policy)
    first = calls[(calls["provider"] == "p1") & (calls["model"] == "big")]
    assert len(first) > 50
