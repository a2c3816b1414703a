"""One deadline through every step (issue 9): the seed's fault suite, propagation on and off,
budgets kept apart, deadline-aware admission, tool steps and their action records.

Timelines are exact: constant latencies and scripted draws (tests/helpers.py), so each
assertion is to the scheduled second. Every policy kind taking the keys in a whole run is in
tests/integration/test_deadlines.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from sim.analysis.metrics import SUMMARY_METRICS, summarize
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.rows import CONFIRMED, PLANNED, UNKNOWN
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from sim.policy.actions import actions_frame
from tests.helpers import (
    Draw,
    ScriptedBank,
    build,
    const,
    error,
    ok,
    scenario_dict,
    scenario_dict_with,
    simulate,
    step,
)

#: Slack for comparing simulated times.
EPS = 1e-9


def tool_step(step_id: str, *after: str, **tool: Any) -> dict[str, Any]:
    """A tool step with constant commit and confirmation times (0.5 s and 0.5 s by default)."""
    spec = {"commit_s": const(0.5), "confirm_s": const(0.5), **tool}
    budget = spec.pop("budget_s", None)
    data: dict[str, Any] = {"id": step_id, "kind": "tool", "tool": spec}
    if after:
        data["after"] = list(after)
    if budget is not None:
        data["budget_s"] = budget
    return data


def scenario(steps: list[dict[str, Any]], policy: dict[str, Any], **overrides: Any) -> Scenario:
    """A one-policy scenario named `p` with these steps."""
    return build(steps, {"p": policy}, **overrides)


# ----------------------------------------------------------------------------- the fault suite


def test_model_delayed_beyond_its_attempt_budget_is_aborted_and_its_slot_returns() -> None:
    """One slot; request 0's call would take 11 s but its step's attempt budget is 2 s: it is
    cut at 2 s (`ended_by` attempt) and request 1, queued since 0 s, gets the slot then (its
    own attempt budget counts from there: the queue wait has a budget of its own)."""
    s = scenario(
        [step("s1", attempt_budget_s=2.0)],
        {"kind": "wait"},
        providers={
            "p1": {
                "concurrency": 1,
                "serves": {"big": {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}},
            }
        },
    )
    bank = ScriptedBank(lambda _s, _a, i: ok(1.0, 10.0) if i == 0 else ok(0.5, 0.5), 2)
    calls = simulate(s, "p", bank, arrivals=(0.0, 0.0)).calls.set_index("request_id")
    assert calls.loc[0, "outcome"] == "timeout"
    assert calls.loc[0, "ended_by"] == "attempt"
    assert calls.loc[0, "end_s"] == pytest.approx(2.0)
    assert calls.loc[1, "queue_s"] == pytest.approx(2.0)  # the slot came back at the cut
    assert calls.loc[1, "outcome"] == "ok"


def _disconnecting(propagate: bool) -> Scenario:
    return scenario(
        [step("a"), step("b")],  # two parallel root steps, both in flight at the hang-up
        {"kind": "wait", "propagate_deadline": propagate},
        customers={"disconnect": {"probability": 1.0, "after_s": const(1.5)}},
    )


def test_caller_disconnect_cancels_every_in_flight_call() -> None:
    bank = ScriptedBank({}, 1, default=ok(1.0, 5.0))
    result = simulate(_disconnecting(True), "p", bank)
    calls, run = result.calls, result.requests.iloc[0]
    assert len(calls) == 2
    assert (calls["outcome"] == "cancelled").all()
    assert (calls["ended_by"] == "disconnect").all()
    assert (calls["end_s"] == 1.5).all()
    assert not calls["orphan"].any()
    assert run["fail_reason"] == "disconnect"
    assert not run["ok"]
    # without propagation the hang-up reaches no call: both run on, as orphan work
    orphaned = simulate(_disconnecting(False), "p", bank).calls
    assert (orphaned["outcome"] == "ok").all()
    assert orphaned["orphan"].all()


def test_request_picked_up_too_late_starts_no_attempt() -> None:
    """One slot; request 0 holds it for 8 s; request 1 (deadline 10 s, expected attempt 3 s)
    is picked up at 8 s with 2 s left and refuses to start: no service, nothing billed. A
    step reached with less time left than an attempt takes sends nothing at all."""
    s = scenario(
        [step("s1")],
        {"kind": "wait", "admission": {"expected": 3.0}},
        deadline_s=10.0,
        providers={
            "p1": {
                "concurrency": 1,
                "serves": {"big": {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}},
            }
        },
    )
    bank = ScriptedBank(lambda _s, _a, i: ok(1.0, 7.0) if i == 0 else ok(1.0, 1.0), 2)
    result = simulate(s, "p", bank, arrivals=(0.0, 0.0))
    late = result.calls.set_index("request_id").loc[1]
    assert late["ended_by"] == "admission"
    assert late["queue_s"] == pytest.approx(8.0)
    assert late["end_s"] == pytest.approx(8.0)
    assert late["cost_usd"] == 0.0
    runs = result.requests.set_index("request_id")
    assert runs.loc[1, "refused_starts"] == 1
    assert runs.loc[1, "end_s"] == pytest.approx(8.0)  # failure reported at once, not at 10 s

    chain = scenario(
        [step("s1"), step("s2", "s1")],
        {"kind": "wait", "admission": {"expected": 3.0}},
        deadline_s=10.0,
    )
    result = simulate(chain, "p", ScriptedBank({("s1", 0): ok(1.0, 7.5)}, 1))
    assert list(result.calls["step"]) == ["s1"]  # s2 had 1.5 s left: never sent
    assert result.requests.loc[0, "refused_starts"] == 1
    assert result.requests.loc[0, "fail_step"] == "s2"
    assert result.requests.loc[0, "fail_reason"] == "refused"


def test_transient_error_near_the_deadline_starts_no_futile_retry() -> None:
    """The first attempt errs at 8 s of a 10 s deadline; an attempt takes ~3 s. Without
    admission the retry starts anyway and is cancelled at the deadline (billed); with it the
    retry is refused, counted, and the failure is reported at 8 s."""
    draws = ScriptedBank({("s1", 0): error(8.0), ("s1", 1): ok(1.0, 2.0)}, 1)
    plain = simulate(scenario([step("s1")], {"kind": "wait", "retries": 2}, deadline_s=10.0),
                     "p", draws)  # fmt: skip
    assert list(plain.calls["outcome"]) == ["error", "cancelled"]
    assert plain.calls["cost_usd"].iloc[1] > 0  # the futile retry is billed
    admitted = simulate(
        scenario(
            [step("s1")],
            {"kind": "wait", "retries": 2, "admission": {"expected": 3.0}},
            deadline_s=10.0,
        ),
        "p",
        draws,
    )
    assert list(admitted.calls["outcome"]) == ["error"]
    run = admitted.requests.iloc[0]
    assert run["refused_retries"] == 1
    assert run["end_s"] == pytest.approx(8.0)
    assert run["fail_reason"] == "error"
    assert not plain.requests["ok"].iloc[0]  # the same outcome, for less


def test_tool_delayed_after_accepting_ends_unknown_and_is_not_blindly_resubmitted() -> None:
    """The remote commits at 0.5 s but its confirmation takes 5 s; the step's budget is 2 s.
    The action ends unknown (committed all the same) and, not idempotent, is not re-submitted
    although retries remain; with an idempotency key the re-submit is recognised."""
    for idempotent in (False, True):
        s = scenario(
            [
                tool_step("act", confirm_s=const(5.0), retries=2, idempotent=idempotent)
                | {"attempt_budget_s": 2.0}
            ],
            {"kind": "wait"},
        )
        result = simulate(s, "p")
        actions = actions_frame(result.records)
        first = actions.iloc[0]
        assert first["state"] == UNKNOWN
        assert first["ended_by"] == "attempt"
        assert first["committed_s"] == pytest.approx(0.5)  # cancellation cannot undo it
        assert not result.requests["ok"].iloc[0]
        assert result.requests["fail_reason"].iloc[0] == UNKNOWN
        if not idempotent:
            assert len(actions) == 1  # reconcile, no blind re-submit
        else:
            assert len(actions) == 3  # re-submits with the same key...
            assert list(actions["recognised"]) == [False, True, True]  # ...are recognised
            assert actions["duplicate"].sum() == 0
            assert actions["committed_s"].notna().sum() == 1


def test_sdk_retries_stay_within_the_deadline_and_are_counted() -> None:
    """An SDK retrying hard errors (1 s each) on its own, backoff 1 s, 2 s, 4 s: every call it
    makes ends by the 6 s deadline and each is a row of calls.parquet (sdk_retry > 0); with
    admission the retry that cannot fit is refused and counted."""
    backoff = {"base_s": 1.0, "max_s": 8.0, "jitter": "none"}
    serves = {"big": {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}}
    providers = {"p1": {"sdk": {"retries": 5, "backoff": backoff}, "serves": serves}}
    bank = ScriptedBank({}, 1, default=error(1.0))
    for admission in (None, {"expected": 1.0}):
        policy: dict[str, Any] = {"kind": "wait"}
        if admission:
            policy["admission"] = admission
        s = scenario([step("s1")], policy, deadline_s=6.0, providers=providers)
        result = simulate(s, "p", bank)
        calls = result.calls
        assert (calls["end_s"] <= 6.0 + EPS).all()
        assert (calls["start_s"] < 6.0).all()
        assert list(calls["sdk_retry"]) == list(range(len(calls)))
        summary = summarize(result.requests, calls).iloc[0]
        assert summary["sdk_retries_per_request"] == len(calls) - 1
        if admission:
            # 0-1 err, wait 1, 2-3 err, wait 2 would leave 1 s: 3 s left is not > 2 + 1
            assert len(calls) == 2
            assert result.requests["refused_retries"].iloc[0] == 1
        else:
            assert len(calls) == 3  # the third starts at 5 s and is cut by the deadline
            assert calls["outcome"].iloc[-1] == "cancelled"


def test_stream_cancelled_midway_emits_no_completion() -> None:
    """The first step streams its first token at 1 s and would finish at 11 s; the deadline at
    5 s cancels it mid-stream: no answer, no completion of the step, the tool step after it is
    never submitted (not even planned), the run has no first signal."""
    s = scenario(
        [step("s1"), tool_step("act", "s1")],
        {"kind": "wait"},
        deadline_s=5.0,
        billing={"cancelled": "elapsed"},
    )
    result = simulate(s, "p", ScriptedBank({("s1", 0): ok(1.0, 10.0)}, 1))
    call = result.calls.iloc[0]
    assert call["outcome"] == "cancelled"
    assert call["ended_by"] == "deadline"
    assert math.isnan(call["ttft_s"])  # no completed answer recorded
    assert 0 < call["output_tokens"] < 100  # billed what was streamed before the cancel
    assert result.records.actions == []
    run = result.requests.iloc[0]
    assert not run["ok"]
    assert math.isnan(run["first_signal_s"])


# ----------------------------------------------------------------------------- propagation


def _long_call(propagate: bool, concurrency: int = 1_000_000) -> Scenario:
    return scenario(
        [step("s1")],
        {"kind": "wait", "propagate_deadline": propagate},
        deadline_s=5.0,
        providers={
            "p1": {
                "concurrency": concurrency,
                "serves": {"big": {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}},
            }
        },
    )


def test_without_propagation_the_call_runs_on_as_billed_orphan_work() -> None:
    bank = ScriptedBank(lambda _s, _a, i: ok(1.0, 9.0) if i == 0 else ok(0.2, 0.3), 2)
    on = simulate(_long_call(True, 1), "p", bank, arrivals=(0.0, 6.0))
    off = simulate(_long_call(False, 1), "p", bank, arrivals=(0.0, 6.0))
    # the request fails at its deadline either way
    for result in (on, off):
        run = result.requests.set_index("request_id").loc[0]
        assert not run["ok"]
        assert run["end_s"] == 5.0
        assert run["fail_reason"] == "deadline"
    c_on, c_off = (r.calls.set_index("request_id") for r in (on, off))
    assert c_on.loc[0, "end_s"] == 5.0
    assert not c_on.loc[0, "orphan"]
    assert c_off.loc[0, "end_s"] == 10.0
    assert c_off.loc[0, "orphan"]
    assert c_off.loc[0, "outcome"] == "ok"  # an answer nobody reads
    assert c_off.loc[0, "cost_usd"] == pytest.approx(0.0012)
    # the orphan still held the only slot: request 1 (at 6 s) queued until 10 s
    assert c_on.loc[1, "queue_s"] == 0.0
    assert c_off.loc[1, "queue_s"] == pytest.approx(4.0)
    s_on, s_off = (summarize(r.requests, r.calls).iloc[0] for r in (on, off))
    assert s_on["orphan_calls"] == 0
    assert s_off["orphan_calls"] == 1
    assert s_off["orphan_tokens"] == 1100
    assert s_off["orphan_cost_usd"] == pytest.approx(0.0012)


def test_reserve_cuts_attempts_early_and_delays_delivery() -> None:
    """deadline 10 s, reserve 2 s: an attempt is given until 8 s; an answer at 3 s is
    delivered at 5 s."""
    s = scenario([step("s1")], {"kind": "wait"}, deadline_s=10.0)
    data = s.model_dump(mode="json", exclude_none=True)
    data["workflow"]["reserve_s"] = 2.0
    reserved = scenario_from_dict(data)
    slow = simulate(reserved, "p", ScriptedBank({("s1", 0): ok(1.0, 20.0)}, 1))
    call = slow.calls.iloc[0]
    assert call["outcome"] == "timeout"
    assert call["ended_by"] == "deadline"
    assert call["end_s"] == pytest.approx(8.0)
    assert slow.requests["end_s"].iloc[0] == pytest.approx(8.0)  # failure reported at 8 s
    fast = simulate(reserved, "p", ScriptedBank({("s1", 0): ok(1.0, 2.0)}, 1))
    assert fast.requests["ok"].iloc[0]
    assert fast.requests["latency_s"].iloc[0] == pytest.approx(5.0)


def test_budgets_are_kept_apart_and_named() -> None:
    """A queue budget drops a call waiting too long for a slot; a step budget cuts the retry
    that would outlive it; the summary counts each breach per run."""
    s = scenario(
        [step("s1", queue_budget_s=1.0, budget_s=4.0)],
        {"kind": "wait", "retries": 1},
        providers={
            "p1": {
                "concurrency": 1,
                "serves": {"big": {"ttft_s": const(1.0), "tokens_per_s": const(100.0)}},
            }
        },
    )
    script = {("s1", 0): ok(1.0, 0.8), ("s1", 1): ok(1.0, 9.0)}
    bank = ScriptedBank(lambda st, a, i: script[(st, a)] if i == 0 else error(1.0), 2)
    result = simulate(s, "p", bank, arrivals=(0.0, 0.5))
    calls = result.calls
    second = calls[calls["request_id"] == 1]
    assert list(second["ended_by"]) == ["queue", ""]  # dropped at 1.5 s; the retry errs
    summary = summarize(result.requests, calls).iloc[0]
    assert summary["breach_queue"] == 0.5
    assert summary["breach_step"] == 0.0
    cut = simulate(s, "p", ScriptedBank({("s1", 0): error(3.0), ("s1", 1): ok(1.0, 9.0)}, 1))
    assert list(cut.calls["ended_by"]) == ["", "step"]
    assert cut.calls["end_s"].iloc[1] == pytest.approx(4.0)
    assert summarize(cut.requests, cut.calls).iloc[0]["breach_step"] == 1.0


def test_first_signal_is_the_first_token_of_the_first_answer() -> None:
    s = scenario([step("s1"), step("s2", "s1")], {"kind": "wait"}, first_signal_s=1.0)
    bank = ScriptedBank({("s1", 0): ok(0.7, 1.0), ("s2", 0): ok(0.2, 1.0)}, 1)
    result = simulate(s, "p", bank, arrivals=(3.0,))
    assert result.requests["first_signal_s"].iloc[0] == pytest.approx(0.7)
    row = summarize(result.requests, result.calls, first_signal_s=1.0).iloc[0]
    assert row["first_signal_p50_s"] == pytest.approx(0.7)
    assert row["first_signal_hit_rate"] == 1.0


def test_customer_resend_submits_again_duplicate_unless_idempotent() -> None:
    """The tool step's confirmation outlives the deadline every time: the first run's action
    is unknown but committed; the customer re-sends; the re-send's submit commits again
    (a duplicate) unless it carries the idempotency key."""
    counts = {}
    for idempotent in (False, True):
        s = scenario(
            [tool_step("act", confirm_s=const(10.0), idempotent=idempotent)],
            {"kind": "wait"},
            deadline_s=3.0,
            customers={"retry": {"probability": 1.0, "max": 1, "delay_s": 1.0}},
        )
        result = simulate(s, "p")
        actions = actions_frame(result.records)
        assert list(actions["state"]) == [UNKNOWN, UNKNOWN]
        assert list(actions["ended_by"]) == ["deadline", "deadline"]
        counts[idempotent] = int(actions["duplicate"].sum())
        assert not actions["late"].any()  # committed at 0.5 s of each run, within it
    assert counts == {False: 1, True: 0}


def test_late_actions_are_committed_after_the_deadline() -> None:
    s = scenario(
        [step("s1"), tool_step("act", "s1", commit_s=const(2.0))],
        {"kind": "wait", "propagate_deadline": False},
        deadline_s=3.0,
    )
    result = simulate(s, "p", ScriptedBank({("s1", 0): ok(1.0, 1.5)}, 1))
    actions = actions_frame(result.records)
    assert list(actions["state"]) == [CONFIRMED]  # the orphaned run went on to its end
    assert actions["late"].iloc[0]  # submitted at 2.5 s, committed at 4.5 s > 3 s
    assert not result.requests["ok"].iloc[0]


def test_tool_not_submitted_without_time_for_it() -> None:
    s = scenario(
        [step("s1"), tool_step("act", "s1")],
        {"kind": "wait", "admission": {"expected": 2.0}},
        deadline_s=4.0,
    )
    result = simulate(s, "p", ScriptedBank({("s1", 0): ok(1.0, 1.5)}, 1))
    actions = actions_frame(result.records)
    assert list(actions["state"]) == [PLANNED]  # recorded, never sent: 1.5 s left < 2 s
    assert result.requests["refused_starts"].iloc[0] == 1


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("edit", "where", "fragment"),
    [
        ({"workflow": {"reserve_s": 100.0}}, "workflow.reserve_s", "must be below deadline_s"),
        ({"step": {"kind": "tool"}}, "workflow.steps[0]", "a step of kind 'tool'"),
        ({"step": {"tool": {"commit_s": const(1.0)}}}, "workflow.steps[0].tool", "only a step"),
        (
            {"policy": {"admission": {"expected": "p100"}}},
            "policies.p.admission.expected",
            "percentile",
        ),
        ({"policy": {"propagate_deadline": "yes"}}, "policies.p.propagate_deadline", "bool"),
    ],
)
def test_bad_deadline_keys_name_their_key_path(
    edit: dict[str, Any], where: str, fragment: str
) -> None:
    data = scenario_dict_with(edit)
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    text = str(caught.value)
    assert where in text, text
    assert fragment in text, text


def test_new_keys_default_to_todays_behaviour() -> None:
    s = scenario([step("s1")], {"kind": "cut", "cutoff": 1.0})
    spec = s.policies["p"]
    assert spec.propagate_deadline is True
    assert spec.admission is None
    assert s.workflow.reserve_s == 0.0
    assert s.workflow.steps[0].kind == "llm"
    assert s.workflow.steps[0].budget_s is None
    assert s.first_signal_s is None
    assert s.customers.disconnect is None


def test_draw_default_is_unchanged() -> None:
    assert Draw().service == 2.0


def test_new_metrics_and_keys_are_documented(repo_root: Path) -> None:
    metrics = (repo_root / "docs" / "metrics.md").read_text(encoding="utf-8")
    for name in (
        "first_signal_p50_s", "first_signal_p99_s", "first_signal_hit_rate", "breach_queue",
        "breach_attempt", "breach_step", "breach_deadline", "refused_retries", "refused_starts",
        "orphan_calls", "orphan_tokens", "orphan_cost_usd", "duplicate_actions", "late_actions",
        "unknown_actions", "ended_by", "orphan", "first_signal_s", "idempotency_key",
    ):  # fmt: skip
        assert f"`{name}`" in metrics, name
        if name in SUMMARY_METRICS:
            assert SUMMARY_METRICS[name][0], name  # a unit
    fmt = (repo_root / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    for key in (
        "first_signal_s", "reserve_s", "kind", "budget_s", "queue_budget_s", "attempt_budget_s",
        "tool", "propagate_deadline", "admission", "disconnect", "commit_s", "confirm_s",
        "idempotent",
    ):  # fmt: skip
        assert f"`{key}`" in fmt, key


@pytest.mark.parametrize("key", ["propagate_deadline", "admission"])
def test_a_step_entry_cannot_set_the_deadline_keys(key: str) -> None:
    """The deadline keys are the request's, hence the whole policy's: a step's entry naming one
    is an error at its key path, not silently ignored."""
    value: Any = False if key == "propagate_deadline" else {"expected": 1.0}
    data = scenario_dict(
        [step("s1")], {"p": {"kind": "cut", "cutoff": 1.0, "steps": {"s1": {key: value}}}}
    )
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    text = str(caught.value)
    assert f"policies.p.steps.s1.{key}" in text, text
    assert "whole request" in text, text


def test_a_per_step_maps_controls_apply_to_every_step() -> None:
    s = build(
        [step("s1"), step("s2", "s1")],
        {
            "cut": {"kind": "cut", "cutoff": 1.0},
            "mixed": {
                "kind": "per_step",
                "steps": {"s1": "cut"},
                "default": "cut",
                "controls": {"retry_budget": {}},
            },
        },
    )
    plan = compile_scenario(s)
    specs = plan.policies["mixed"].written
    assert all(spec.controls is not None for spec in specs.values())
    assert plan.policies["cut"].written["s1"].controls is None
