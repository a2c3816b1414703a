"""The contract scenario through `sim.run`: the article's ranking, one known outcome per call,
totals that are sums of calls, no work after the deadline, a failed run counted at the deadline,
thresholds applied, same seed same tables, common random numbers across policies (also through
the API on a random first token), and a tight TPM's 429s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sim
from sim.model.config import Scenario
from sim.model.rows import OUTCOMES
from tests.engine.test_engine import random_first_token_scenario
from tests.helpers import build, serving, step

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


# ----------------------------------------------------------------------------- shared draw bank


def test_run_gives_every_policy_the_same_draws() -> None:
    """Mutation: `sim.run` gives each policy its own bank (e.g. a stream per policy name).
    Through the public API, wait and cut see the same first token on every call."""
    result = sim.run(random_first_token_scenario(), requests=40, seed=5)
    calls = result.calls.set_index(["policy", "request_id", "step", "attempt"])["ttft_s"]
    wait, cut = calls.loc["wait"].sort_index(), calls.loc["cut"].sort_index()
    assert len(wait) == 80
    assert wait.notna().all()
    pd.testing.assert_series_equal(wait, cut)
