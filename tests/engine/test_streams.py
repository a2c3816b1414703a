"""The stream of a call (issue 26): a stall's place, a mid-stream break, what a cut call holds.

Constant first token (1 s) and speed (100 tokens in 1 s) make every time but the drawn ones
exact; the drawn ones (a stall's onset, its place, a break's share) come from streams of their
own, read back from the bank to check each call exactly, and their laws are checked on a fixed
seed within 4 standard errors (a false alarm about once in 16 000 runs)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from sim.analysis.metrics import calls_frame, requests_frame
from sim.engine import qualify
from sim.engine.choice import single_policy
from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.config import Scenario
from sim.model.latency import lognormal_params
from sim.model.stream import BREAK_AT, ONSET, streamed_share, streamed_shares
from sim.model.streams import CallDrawBank, Streams
from sim.plan import compile_scenario
from tests.engine.test_vectorized import assert_same, tail_scenario
from tests.helpers import build, const, resolved_plan, serving, step

N = 2000


def one_step(serve: dict[str, Any], policy: dict[str, Any], billing: str = "elapsed") -> Scenario:
    """One step of 1000 in / 100 out tokens on p1 (1 s to first token, 1 s of generation)."""
    providers = {"p1": {"serves": {"big": serve, "small": serving()}}}
    return build(
        [step("s1")],
        {"it": policy},
        providers=providers,
        billing={"cancelled": billing},
        arrivals={"kind": "poisson", "rate_per_s": 0.01},
    )


def run_calls(scenario: Scenario, n: int = N, seed: int = 0) -> tuple[pd.DataFrame, CallDrawBank]:
    """The event engine's calls of policy `it` on `n` requests, and the bank they drew from."""
    plan = resolved_plan(scenario, seed)
    streams = Streams(seed, "main")
    times = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    records = Simulation(plan, single_policy(plan.runtime("it")), bank, streams).run(times)
    return calls_frame(records), bank


def stalled(where: Any = "mid_stream", probability: float = 1.0) -> dict[str, Any]:
    """Constant serving with a 10 s stall on every call (or with `probability`)."""
    return serving(stall={"probability": probability, "extra_s": const(10.0), "where": where})


def test_a_call_cut_during_a_mid_stream_stall_bills_what_streamed_before_its_onset() -> None:
    # cut at 5 s: after the first token (1 s) and the onset (at most 2 s), inside the stall
    calls, bank = run_calls(one_step(stalled(), {"kind": "cut", "cutoff": 5.0}))
    assert (calls["outcome"] == "timeout").all()
    pairs = zip(calls["request_id"], calls["attempt"], strict=True)
    onset = np.asarray([bank.uniform(int(i), ONSET, "s1", int(a), 0, 0) for i, a in pairs])
    expected = (100 * onset).astype(np.int64)
    assert calls["tokens_streamed"].tolist() == expected.tolist()
    assert calls["output_tokens"].tolist() == expected.tolist()  # billed: elapsed
    # the onset is uniform: its mean 1/2 within 4 SE (SE = sqrt(1/12 / N) = 0.0065)
    assert abs(onset.mean() - 0.5) < 4 * math.sqrt(1 / 12 / N)


def test_full_and_no_billing_keep_their_meaning_and_the_stream_is_still_recorded() -> None:
    for billing, billed in (("full", 100), ("none", 0)):
        calls, _ = run_calls(one_step(stalled(), {"kind": "cut", "cutoff": 5.0}, billing), 50)
        assert (calls["output_tokens"] == billed).all()
        assert (calls["tokens_streamed"] < 100).all()
        assert calls["tokens_streamed"].sum() > 0


def test_a_stall_before_the_first_token_delays_it_and_not_the_end() -> None:
    before, _ = run_calls(one_step(stalled("before_first_token"), {"kind": "wait"}), 200)
    mid, _ = run_calls(one_step(stalled(), {"kind": "wait"}), 200)
    np.testing.assert_allclose(before["ttft_s"], 11.0)
    np.testing.assert_allclose(mid["ttft_s"], 1.0)
    np.testing.assert_allclose(before["end_s"], mid["end_s"], rtol=1e-12)
    assert (before["tokens_streamed"] == 100).all()


def test_a_share_of_stalls_before_the_first_token() -> None:
    calls, _ = run_calls(one_step(stalled({"before_first_token": 0.4}), {"kind": "wait"}))
    share = float((calls["ttft_s"] > 5.0).mean())
    assert abs(share - 0.4) < 4 * math.sqrt(0.4 * 0.6 / N)  # SE 0.011


def test_a_mid_stream_error_breaks_the_answer_after_a_uniform_share() -> None:
    serve = serving(mid_stream_error_rate=0.2)
    calls, bank = run_calls(one_step(serve, {"kind": "wait"}))
    broken = calls[calls["outcome"] == "broken"]
    assert abs(len(broken) / N - 0.2) < 4 * math.sqrt(0.2 * 0.8 / N)  # SE 0.009
    ids = broken["request_id"].tolist()
    share = np.asarray([bank.uniform(int(i), BREAK_AT, "s1", 0, 0, 0) for i in ids])
    # it ends where it broke: 1 s of first token, then that share of the 1 s of generation
    np.testing.assert_allclose(broken["end_s"] - broken["start_s"], 1.0 + share, rtol=1e-9)
    assert broken["tokens_streamed"].tolist() == (100 * share).astype(np.int64).tolist()
    assert broken["output_tokens"].tolist() == broken["tokens_streamed"].tolist()
    assert abs(share.mean() - 0.5) < 4 * math.sqrt(1 / 12 / len(broken))
    whole = calls[calls["outcome"] == "ok"]
    assert (whole["tokens_streamed"] == 100).all()


def test_a_broken_answer_is_retried_as_a_failure() -> None:
    serve = serving(mid_stream_error_rate=0.5)
    calls, _ = run_calls(one_step(serve, {"kind": "wait", "retries": 1}), 200)
    first = calls[calls["attempt"] == 0]
    again = set(calls.loc[calls["attempt"] == 1, "request_id"])
    assert again == set(first.loc[first["outcome"] == "broken", "request_id"])


def test_the_share_streamed_pauses_during_the_stall() -> None:
    x = np.asarray([0.1, 0.5, 0.6, 5.0, 10.6, 11.0, 20.0])
    shares = streamed_shares(x, np.ones(7), np.full(7, 10.0), np.full(7, 0.5))
    scalar = [streamed_share(float(t), 1.0, 10.0, 0.5) for t in x]
    assert shares.tolist() == scalar
    np.testing.assert_allclose(shares, [0.1, 0.5, 0.5, 0.5, 0.6, 1.0, 1.0])
    # without a stall: the even share of the old law, bit for bit
    assert streamed_share(0.3, 2.0, 0.0, math.nan) == min(1.0, 0.3 / 2.0)


def test_the_vectorized_engine_agrees_on_what_cut_calls_streamed() -> None:
    calls = assert_same(tail_scenario(billing="elapsed"), "cut_seconds")
    cut = calls[calls["outcome"] == "timeout"]
    assert (cut["tokens_streamed"] > 0).any()
    assert (calls.loc[calls["outcome"] == "ok", "tokens_streamed"] > 0).all()


def test_a_placed_stall_or_a_break_runs_on_the_vectorized_engine() -> None:
    """Both engines run them (their equivalence: tests/engine/test_vectorized_streams.py)."""
    for serve, feature in (
        (stalled("before_first_token"), "stream.stall_where"),
        (serving(mid_stream_error_rate=0.1), "stream.mid_stream_error"),
    ):
        policy = compile_scenario(one_step(serve, {"kind": "wait"})).policies["it"]
        assert feature in {f.name for f in policy.features}
        assert qualify.qualifies(policy) == (True, "")


# ---------------------------------------------------------------- the cuts that watch the stream


def test_an_idle_cut_ends_a_stalled_call_at_onset_plus_the_timeout_and_bills_the_onset() -> None:
    """Closed form (b): a mid-stream stall (10 s) longer than `idle_timeout_s` (3 s), onset
    uniform: the call ends at send + first token (1 s) + onset x generation (1 s) + 3 s and
    bills exactly the tokens streamed before its onset; exact per call."""
    calls, bank = run_calls(one_step(stalled(), {"kind": "wait", "idle_timeout_s": 3.0}), 500)
    assert (calls["outcome"] == "timeout").all()
    assert (calls["ended_by"] == "idle").all()
    onset = np.asarray([bank.uniform(int(i), ONSET, "s1", 0, 0, 0) for i in calls["request_id"]])
    np.testing.assert_allclose(calls["end_s"] - calls["start_s"], 1.0 + onset + 3.0, rtol=1e-12)
    expected = (100 * onset).astype(np.int64).tolist()
    assert calls["output_tokens"].tolist() == expected
    assert calls["tokens_streamed"].tolist() == expected


def test_a_stall_shorter_than_the_idle_timeout_is_not_cut() -> None:
    serve = serving(stall={"probability": 1.0, "extra_s": const(2.0)})
    calls, _ = run_calls(one_step(serve, {"kind": "wait", "idle_timeout_s": 3.0}), 100)
    assert (calls["outcome"] == "ok").all()
    np.testing.assert_allclose(calls["end_s"] - calls["start_s"], 4.0)


def test_a_first_token_cut_with_retries_on_fresh_draws_meets_its_closed_form() -> None:
    """Closed form (a): first token lognormal (median 1 s, p99 6 s), generation fixed (1 s),
    `first_token_timeout_s` T = 2 s, k = 2 retries at once, deadline 6 s. Attempt j (0, 1, 2)
    starts at jT and answers iff its first token X <= min(T, 6 - jT - 1) (the last one's room is
    1 s), so P(answered) = sum_j (1-p)^j F(c_j) with p = F(T), and the mean latency of the
    answered is sum_j (1-p)^j (F(c_j)(jT + 1) + E[X; X <= c_j]) / P. Held within 4 SE on N
    requests (binomial SE for P; the sample's SE for the mean)."""
    serve = {
        "ttft_s": {"median": 1.0, "p99": 6.0},
        "tokens_per_s": const(100.0),
    }
    policy = {"kind": "wait", "retries": 2, "first_token_timeout_s": 2.0}
    providers = {"p1": {"serves": {"big": serve, "small": serving()}}}
    scenario = build(
        [step("s1")],
        {"it": policy},
        providers=providers,
        deadline_s=6.0,
        arrivals={"kind": "poisson", "rate_per_s": 0.01},
    )
    plan = resolved_plan(scenario, 0)
    streams = Streams(0, "main")
    n = 4000
    times = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    records = Simulation(plan, single_policy(plan.runtime("it")), bank, streams).run(times)
    requests = requests_frame(records)
    calls = calls_frame(records)
    mu, sigma = lognormal_params(1.0, 6.0)

    def cdf(c: float) -> float:
        return float(norm.cdf((math.log(c) - mu) / sigma))

    def partial_mean(c: float) -> float:  # E[X; X <= c]
        return math.exp(mu + sigma**2 / 2) * float(norm.cdf((math.log(c) - mu - sigma**2) / sigma))

    t, p = 2.0, cdf(2.0)
    rooms = [min(t, 6.0 - j * t - 1.0) for j in range(3)]
    answered = sum((1 - p) ** j * cdf(c) for j, c in enumerate(rooms))
    mean = (
        sum((1 - p) ** j * (cdf(c) * (j * t + 1.0) + partial_mean(c)) for j, c in enumerate(rooms))
        / answered
    )
    ok = requests[requests["ok"]]
    share = len(ok) / n
    assert abs(share - answered) < 4 * math.sqrt(answered * (1 - answered) / n)
    latency = ok["latency_s"].to_numpy(float)
    assert abs(latency.mean() - mean) < 4 * latency.std(ddof=1) / math.sqrt(len(latency))
    cut = calls[calls["ended_by"] == "first_token"]
    assert len(cut) > 0
    np.testing.assert_allclose(cut["end_s"] - cut["start_s"], 2.0, rtol=1e-12)
    assert (cut["tokens_streamed"] == 0).all()  # billed per billing.cancelled (here: full)


def test_the_stream_cuts_run_on_the_vectorized_engine() -> None:
    """Both engines run them (their equivalence: tests/engine/test_vectorized_streams.py)."""
    for key, feature in (
        ("first_token_timeout_s", "stream.first_token_timeout"),
        ("idle_timeout_s", "stream.idle_timeout"),
    ):
        scenario = one_step(stalled(), {"kind": "cut", "cutoff": 5.0, key: 1.0})
        policy = compile_scenario(scenario).policies["it"]
        assert feature in {f.name for f in policy.features}
        assert qualify.qualifies(policy) == (True, "")
