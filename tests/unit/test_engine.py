"""sim.engine.simulation: requests, deadlines, cancellation, records; on the contract and on tiny
scenarios."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import (
    BIG_IN,
    BIG_OUT,
    Draw,
    ScriptedBank,
    build,
    error,
    ok,
    serving,
    simulate,
    step,
    timeline,
)

import sim
from sim.analysis.metrics import summarize
from sim.model.config import Scenario
from sim.model.rows import OUTCOMES

N_CONTRACT = 600
KEYS = ["policy", "request_id", "resend"]


@pytest.fixture(scope="module")
def contract(contract_path: Path) -> Scenario:
    """The public contract scenario (`contract_path` comes from tests/conftest.py)."""
    return sim.load_scenario(contract_path)


@pytest.fixture(scope="module")
def contract_run(contract: Scenario) -> sim.RunResult:
    """Every policy of the contract on 600 requests (about a second)."""
    return sim.run(contract, requests=N_CONTRACT)


# ----------------------------------------------------------------------------- contract


def test_contract_policies_rank_as_the_article_says(contract_run: sim.RunResult) -> None:
    s = contract_run.summary.set_index("policy")
    assert list(s.index) == ["wait", "cut", "race", "hedge", "downshift"]
    for better in ("cut", "race"):
        assert s.loc[better, "hit_rate"] > s.loc["wait", "hit_rate"]
        assert s.loc[better, "p95_s"] < s.loc["wait", "p95_s"]
    assert s.loc["race", "cost_per_request_usd"] > s.loc["wait", "cost_per_request_usd"]
    assert (s["requests"] == N_CONTRACT).all()


def test_every_call_has_exactly_one_known_outcome(contract_run: sim.RunResult) -> None:
    calls = contract_run.calls
    assert len(calls) > 10 * N_CONTRACT
    assert calls["outcome"].notna().all()
    assert set(calls["outcome"]) <= set(OUTCOMES)
    # one row per call: the rows add up to what each request counted
    assert len(calls) == int(contract_run.requests["calls"].sum())
    assert not calls.duplicated(["policy", "request_id", "resend", "step", "attempt"]).any()
    assert (calls["end_s"] >= calls["start_s"]).all()
    assert (calls["queue_s"] >= 0).all()


def test_request_totals_are_sums_of_their_calls(contract_run: sim.RunResult) -> None:
    calls = contract_run.calls.assign(billed=lambda c: c["input_tokens"] + c["output_tokens"])
    sums = calls.groupby(KEYS).agg(
        sum_cost=("cost_usd", "sum"), sum_tokens=("billed", "sum"), n=("outcome", "size")
    )
    requests = contract_run.requests.set_index(KEYS)
    joined = requests.join(sums, how="left").fillna({"sum_cost": 0.0, "sum_tokens": 0, "n": 0})
    assert len(joined) == len(requests) == 5 * N_CONTRACT
    np.testing.assert_allclose(joined["cost_usd"], joined["sum_cost"], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(joined["tokens"], joined["sum_tokens"].astype(np.int64))
    np.testing.assert_array_equal(joined["calls"], joined["n"].astype(np.int64))
    assert joined["cost_usd"].sum() > 0


def test_no_work_after_the_deadline(contract_run: sim.RunResult, contract: Scenario) -> None:
    deadline = contract.deadline_s
    req = contract_run.requests
    assert (req["latency_s"] <= deadline + 1e-9).all()
    calls = contract_run.calls.merge(
        req[[*KEYS, "arrival_s", "latency_s", "ok", "fail_reason"]], on=KEYS
    )
    due = calls["arrival_s"] + deadline
    assert (calls["start_s"] <= due + 1e-9).all()
    assert (calls["end_s"] <= due + 1e-9).all()
    # requests that ran out of time end exactly at the deadline, their calls cancelled then
    late = calls[calls["fail_reason"] == "deadline"]
    assert late["request_id"].nunique() > 10  # wait misses plenty of deadlines here
    at_deadline = late[np.isclose(late["end_s"], late["arrival_s"] + deadline)]
    assert (at_deadline["outcome"] == "cancelled").all()
    per_request = at_deadline.groupby(KEYS)["outcome"].size()
    assert len(per_request) == late.groupby(KEYS).ngroups  # each has a call cut off there
    assert not late["ok"].any()


def test_calls_end_at_or_before_their_request(contract_run: sim.RunResult) -> None:
    calls = contract_run.calls.merge(contract_run.requests, on=KEYS, suffixes=("", "_run"))
    assert (calls["end_s"] <= calls["end_s_run"] + 1e-9).all()


def test_a_failed_run_counts_at_the_deadline_and_says_why(
    contract_run: sim.RunResult, contract: Scenario
) -> None:
    """No failure looks fast: every failed run's latency is the deadline; its real end, reason
    and failing step are kept, and a successful run has neither reason nor step."""
    req = contract_run.requests
    failed, ok = req[~req["ok"]], req[req["ok"]]
    assert len(failed) > 10
    np.testing.assert_allclose(failed["latency_s"], contract.deadline_s)
    assert (failed["end_s"] <= failed["arrival_s"] + contract.deadline_s + 1e-9).all()
    early = failed[failed["fail_reason"] != "deadline"]
    assert len(early) > 0  # errors and junk end some runs before their deadline
    assert (early["end_s"] < early["arrival_s"] + contract.deadline_s).all()
    assert set(early["fail_reason"]) <= {"error", "invalid", "timeout", "rate_limited"}
    assert (failed["fail_step"].str.len() > 0).all()
    assert (ok["fail_reason"] == "").all()
    assert (ok["fail_step"] == "").all()
    np.testing.assert_allclose(ok["latency_s"], ok["end_s"] - ok["arrival_s"])


def test_at_most_one_answer_per_step(contract_run: sim.RunResult) -> None:
    calls = contract_run.calls
    answers = calls[calls["outcome"] == "ok"].groupby([*KEYS, "step"]).size()
    assert answers.max() == 1  # race and hedge losers are cancelled, never also answered
    winners = contract_run.requests[contract_run.requests["ok"]].set_index(KEYS)
    per_run = answers.groupby(level=KEYS).size()
    assert (per_run.reindex(winners.index) == 10).all()  # a success answered all ten steps


def test_contract_thresholds_are_applied(contract_run: sim.RunResult) -> None:
    calls = contract_run.calls
    cutoff = contract_run.thresholds["cut"]
    cut = calls[(calls["policy"] == "cut") & (calls["outcome"] == "timeout")]
    assert len(cut) > 20
    np.testing.assert_allclose(cut["end_s"] - cut["start_s"], cut["step"].map(cutoff), rtol=1e-9)
    after = contract_run.thresholds["hedge"]
    hedge = calls[calls["policy"] == "hedge"].set_index([*KEYS, "step", "attempt"])
    second = hedge.xs(1, level="attempt")
    first = hedge.xs(0, level="attempt").loc[second.index]
    assert len(second) > 20
    delay = second["start_s"] - first["start_s"]
    limit = second.index.get_level_values("step").map(after).to_numpy()
    # the hedge fires `after` past the primary's start, or earlier if the primary failed first
    slow = first["end_s"] > first["start_s"] + limit - 1e-9
    assert slow.sum() > 10
    assert (~slow).sum() > 10
    np.testing.assert_allclose(delay[slow], limit[slow.to_numpy()], rtol=1e-9)
    np.testing.assert_allclose(delay[~slow], (first["end_s"] - first["start_s"])[~slow])
    assert (first.loc[~slow, "outcome"] != "ok").all()


def test_same_seed_same_tables(contract: Scenario, contract_run: sim.RunResult) -> None:
    again = sim.run(contract, requests=N_CONTRACT)
    pd.testing.assert_frame_equal(again.summary, contract_run.summary)
    pd.testing.assert_frame_equal(again.requests, contract_run.requests)
    pd.testing.assert_frame_equal(again.calls, contract_run.calls)
    other = sim.run(contract, requests=N_CONTRACT, seed=contract.seed + 1, policies=["wait"])
    mine = contract_run.requests[contract_run.requests["policy"] == "wait"]
    assert not np.array_equal(other.requests["latency_s"], mine["latency_s"])


def test_common_random_numbers_across_policies(contract_run: sim.RunResult) -> None:
    req = contract_run.requests[contract_run.requests["resend"] == 0]
    arrivals = req.pivot(index="request_id", columns="policy", values="arrival_s")
    assert (arrivals.nunique(axis=1) == 1).all()  # same arrivals under every policy
    calls = contract_run.calls
    first = calls[(calls["step"] == "s1") & (calls["attempt"] == 0) & (calls["resend"] == 0)]
    first = first.assign(duration=first["end_s"] - first["start_s"])
    lived = first[first["outcome"].isin(["ok", "invalid", "error"]) & (first["queue_s"] == 0)]
    table = lived.pivot(index="request_id", columns="policy", values="duration")
    for policy in ("cut", "race", "hedge", "downshift"):
        both = table[["wait", policy]].dropna()
        assert len(both) > N_CONTRACT * 0.5
        np.testing.assert_array_equal(both["wait"], both[policy])
    outcome = first.pivot(index="request_id", columns="policy", values="outcome")
    finished = outcome[outcome.isin(["ok", "invalid", "error"]).all(axis=1)]
    assert (finished.nunique(axis=1) == 1).all()  # the same drawn outcome, too


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


# ----------------------------------------------------------------------------- quotas


def test_tight_tpm_rate_limits_and_wait_retries() -> None:
    providers = {"p1": {"tpm": 2200, "serves": {"big": serving()}}}  # two calls a minute
    scenario = build(
        [step("s1"), step("s2", "s1")],
        {"wait": {"kind": "wait", "retries": 2}},
        providers=providers,
        arrivals={"kind": "poisson", "rate_per_s": 0.5},
        deadline_s=30.0,
    )
    result = sim.run(scenario, requests=30, seed=2)
    calls = result.calls
    limited = calls[calls["outcome"] == "rate_limited"]
    assert len(limited) > 10
    assert (limited["end_s"] == limited["start_s"]).all()
    assert (limited["cost_usd"] == 0).all()
    index = calls.set_index(["request_id", "resend", "step", "attempt"])
    arrival = result.requests.set_index(["request_id", "resend"])["arrival_s"]
    retried = 0
    for row in limited.itertuples():
        following = (row.request_id, row.resend, row.step, row.attempt + 1)
        time_left = arrival[(row.request_id, row.resend)] + 30.0 - row.end_s
        assert row.retry_after_s > 0
        if row.attempt < 2 and row.retry_after_s < time_left:
            # the 429 is retried once its Retry-After has passed, not at once
            assert following in index.index
            assert index.loc[following, "start_s"] == pytest.approx(row.end_s + row.retry_after_s)
            retried += 1
        else:  # out of retries, or the deadline cannot fund the wait: not retried
            assert following not in index.index
    assert retried > 0
    assert result.summary.iloc[0]["rate_limited_per_request"] == len(limited) / 30


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
