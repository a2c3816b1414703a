"""Diagnose, then pick the direction: exact timelines of `adaptive`, `draft`, validators,
truncation, prefill and optional steps on scripted calls (1 s first token + 1 s generation by
default; 100 output tokens)."""

from __future__ import annotations

import pytest

from sim.model.rows import OUTCOME_TRUNCATED
from tests.helpers import (
    ScriptedBank,
    build,
    error,
    invalid,
    ok,
    scenario_dict,
    serving,
    simulate,
    step,
    timeline,
)

ADAPTIVE = {
    "stuck": {"kind": "adaptive", "cutoff": 30.0, "ttft_cutoff": 2.0, "attempts": 2},
    "up": {"kind": "adaptive", "cutoff": 30.0, "fall_up": "big"},
    "down": {"kind": "adaptive", "cutoff": 4.0, "fall_down": "small"},
    "draft": {"kind": "draft", "model": "small", "upgrade_within": 10.0},
    "wait": {"kind": "wait"},
}


def one(policy: str, script: dict, steps: list | None = None, **extra: object):
    scenario = build(steps or [step("s1")], ADAPTIVE, **extra)
    return simulate(scenario, policy, ScriptedBank(script))


def test_a_stuck_call_is_hedged_and_the_fresh_attempt_wins() -> None:
    # attempt 0 gets no first token for 50 s: at the 2 s ttft cutoff a fresh attempt starts in
    # parallel, answers at 4 s, and the stuck one is cancelled (not waited out)
    result = one("stuck", {("s1", 0): ok(ttft=50.0)})
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 4.0, "cancelled"),
        ("s1", 1, "p1", "big", 2.0, 4.0, "ok"),
    ]
    assert bool(result.requests.ok.iloc[0])


def test_a_call_with_its_first_token_is_not_hedged() -> None:
    result = one("stuck", {("s1", 0): ok(ttft=1.0, generation=5.0)})
    assert timeline(result.calls) == [("s1", 0, "p1", "big", 0.0, 6.0, "ok")]


def test_an_invalid_answer_falls_up() -> None:
    result = one("up", {("s1", 0): invalid()}, [step("s1", model="small")])
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "small", 0.0, 1.0, "invalid"),
        ("s1", 1, "p1", "big", 1.0, 3.0, "ok"),
    ]


def test_an_error_is_redrawn_on_the_same_model() -> None:
    result = one("up", {("s1", 0): error()}, [step("s1", model="small")])
    assert [c[3] for c in timeline(result.calls)] == ["small", "small"]


def test_a_slow_generating_call_falls_down() -> None:
    # first token at 1 s, then a stall from mid-stream (1 + 2 s) for 100 s: at the 4 s cutoff
    # no token came in the last second, so it cannot finish in time: cut, fall down to small
    result = one("down", {("s1", 0): ok(ttft=1.0, generation=4.0, stall=100.0)})
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 4.0, "cancelled"),
        ("s1", 1, "p1", "small", 4.0, 6.0, "ok"),
    ]


def test_a_stall_that_starts_after_the_cutoff_is_caught_at_the_next_look() -> None:
    # the stall starts at 3.5 s; at 4 s the last second still saw tokens (5 s left: keep);
    # the look a quarter cutoff (1 s) later sees none: cut at 5 s, fall down
    result = one("down", {("s1", 0): ok(ttft=1.0, generation=5.0, stall=100.0)})
    assert [(c[3], c[5]) for c in timeline(result.calls)] == [("big", 5.0), ("small", 7.0)]


def test_a_call_flowing_fast_enough_for_the_time_left_is_kept() -> None:
    # at 4 s: 60 of 100 tokens at 20 tok/s = 2 s left, well within the 96 s left: keep it
    result = one("down", {("s1", 0): ok(ttft=1.0, generation=5.0)})
    assert timeline(result.calls) == [("s1", 0, "p1", "big", 0.0, 6.0, "ok")]


def test_a_flowing_call_too_slow_for_the_deadline_falls_down() -> None:
    # 20 tok/s is fine with 96 s left but not with a 5 s deadline: at 4 s, 2 s more > 1 s left
    result = one("down", {("s1", 0): ok(ttft=1.0, generation=5.0)}, deadline_s=5.0)
    assert [c[3] for c in timeline(result.calls)] == ["big", "small"]


def test_an_optional_step_that_fails_does_not_fail_its_request() -> None:
    steps = [step("s1"), step("opt", "s1", required=False), step("s2", "s1")]
    script = {("opt", 0): error()}
    for policy in ("wait", "up"):
        result = one(policy, script | {("opt", 1): error(), ("opt", 2): error()}, steps)
        request = result.requests.iloc[0]
        assert bool(request.ok), policy
        assert bool(request.valid_hit), policy
        assert "ok" not in set(result.calls.loc[result.calls.step == "opt", "outcome"])


#: Every request hard, and a hard answer 2.5x as long on both models: 250 tokens past a step's
#: `max_tokens: 100` (a cap below `output_tokens` itself is refused by validation).
LONG_WHEN_HARD = {
    "hardness": {"share": 1.0},
    "models": {
        name: {**spec, "when_hard": {"length": 2.5}}
        for name, spec in scenario_dict()["models"].items()
    },
}


def test_a_truncated_answer_is_invalid_and_billed_to_the_cut() -> None:
    """The 250-token answer is cut at 100: billed 100 tokens, generating 1 s (100 tok/s)."""
    result = one("wait", {}, [step("s1", max_tokens=100)], **LONG_WHEN_HARD)
    call = result.calls.iloc[0]
    assert call.outcome == OUTCOME_TRUNCATED
    assert call.output_tokens == 100
    assert call.end_s == pytest.approx(1.0 + 1.0)
    assert not bool(result.requests.ok.iloc[0])
    assert result.requests.fail_reason.iloc[0] == OUTCOME_TRUNCATED


def test_a_truncated_answer_falls_down_instead_of_rerunning() -> None:
    result = one("down", {}, [step("s1", max_tokens=100)], **LONG_WHEN_HARD)
    assert [(c[3], c[6]) for c in timeline(result.calls)][:2] == [
        ("big", OUTCOME_TRUNCATED),
        ("small", OUTCOME_TRUNCATED),
    ]


def test_prefill_grows_the_first_token_with_the_prompt() -> None:
    providers = {"p1": {"serves": {"big": serving(ttft_s_per_ktok=0.5), "small": serving()}}}
    result = one("wait", {}, [step("s1", input_tokens=3000)], providers=providers)
    assert result.calls.iloc[0].ttft_s == pytest.approx(1.0 + 1.5)
    assert result.calls.iloc[0].end_s == pytest.approx(3.5)


# ----------------------------------------------------------------------------- validator

VALIDATED = {"catches": 0.0, "latency_s": 0.5, "cost": 0.001}


def test_an_uncaught_invalid_answer_flows_downstream_and_breaks_quality_not_latency() -> None:
    steps = [step("s1", validator=VALIDATED), step("s2", "s1")]
    result = one("wait", {("s1", 0): invalid()}, steps)
    request = result.requests.iloc[0]
    assert bool(request.ok)
    assert not bool(request.valid)
    assert not bool(request.valid_hit)
    assert request.quality == 0.0
    assert request.latency_s == pytest.approx(1.0 + 0.5 + 2.0)  # junk, check, then s2
    first = result.calls.iloc[0]
    assert first.outcome == "ok"
    assert not bool(first.valid)
    assert first.cost_usd == pytest.approx(1000 * 1e-6 + 0.001)  # junk bills input + check


def test_a_caught_invalid_answer_is_a_failure_the_policy_handles() -> None:
    steps = [step("s1", validator={**VALIDATED, "catches": 1.0})]
    result = one("up", {("s1", 0): invalid()}, [dict(steps[0], model="small")])
    assert [c[3] for c in timeline(result.calls)] == ["small", "big"]
    request = result.requests.iloc[0]
    assert bool(request.valid_hit)
    assert request.latency_s == pytest.approx(1.5 + 2.5)


def test_a_quality_floor_makes_a_weak_answer_no_valid_hit() -> None:
    models = {
        "big": {"price_per_mtok": {"input": 1.0, "output": 2.0}},
        "small": {"price_per_mtok": {"input": 0.1, "output": 0.2}, "quality": 0.5},
    }
    steps = [step("s1", model="small"), step("s2", "s1")]
    result = one("wait", {}, steps, models=models, quality_floor=0.8)
    request = result.requests.iloc[0]
    assert bool(request.ok)
    assert bool(request.valid)
    assert request.quality == pytest.approx(0.75)
    assert not bool(request.valid_hit)


# ----------------------------------------------------------------------------- draft race


def test_the_draft_is_kept_when_the_primary_is_stuck() -> None:
    # primary (attempt 0) takes 31 s; the draft answers at 2 s and is kept at the 10 s window
    result = one("draft", {("s1", 0): ok(generation=30.0)})
    assert timeline(result.calls) == [
        ("s1", 0, "p1", "big", 0.0, 10.0, "cancelled"),
        ("s1", 1, "p1", "small", 0.0, 2.0, "ok"),
    ]
    request = result.requests.iloc[0]
    assert (request.draft_kept, request.draft_upgraded) == (1, 0)
    assert request.latency_s == pytest.approx(10.0)


def test_the_draft_is_upgraded_when_the_primary_lands_in_time() -> None:
    result = one("draft", {("s1", 0): ok(generation=5.0)})
    request = result.requests.iloc[0]
    assert (request.draft_kept, request.draft_upgraded) == (0, 1)
    assert request.latency_s == pytest.approx(6.0)
    assert request.quality == 1.0


def test_a_failed_primary_keeps_the_draft_at_once() -> None:
    result = one("draft", {("s1", 0): error(ttft=3.0)})
    request = result.requests.iloc[0]
    assert (request.draft_kept, request.latency_s) == (1, pytest.approx(3.0))
