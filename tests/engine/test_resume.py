"""`resume: true` (issue 26, item 3): a retry after a mid-stream break or cut sends what
streamed as prefill and asks only for the rest.

One step of I = 1000 input and n = 100 output tokens, first token f = 1 s and speed s = 100
tokens/s both constant, a break after a uniform share U of a call's output with probability r,
k retries at once (`wait`), billing `elapsed` (a broken call bills its input and the tokens it
streamed, floor(D U) of its D asked for).

Closed forms. Let D_j be the tokens attempt j asks for (D_0 = n). Without resume D_j = n. With
it D_{j+1} = D_j - floor(D_j U_j) after a break, and since E[floor(m U)] = (m - 1) / 2 for an
integer m, E[D_{j+1} | D_j] = (D_j + 1) / 2, so d_j := E[D_j] = 1 + (n - 1) / 2^j (never below 1:
floor(D U) < D). Attempt j is made with probability r^j (the breaks are independent of the
shares), so per request:
- billed output = sum_j r^j [(1 - r) d_j + r (d_j - 1) / 2];
- billed input = sum_j r^j (I + n - d_j);
- P(answered) = 1 - r^(k+1), the same with or without resume;
- mean latency of an answered request = sum_j r^j (1 - r) [sum_{i<j} (f + d_i / (2 s)) +
  f + d_j / s] / (1 - r^(k+1)) (a broken attempt lasts f + D U / s, an answer f + D / s).
Each is held within 4 standard errors of its sample mean over N requests on a fixed seed (a
false alarm about once in 16 000 runs); the SE is the sample's standard deviation / sqrt(N).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sim.engine import qualify
from sim.model.errors import ScenarioError
from sim.model.stream import BREAK_AT, ONSET
from sim.plan import compile_scenario
from tests.engine.test_streams import one_step, run_calls, stalled
from tests.helpers import build, serving, step

N = 4000
I_IN, N_OUT, F, S = 1000, 100, 1.0, 100.0


def expected(r: float, k: int, resume: bool) -> dict[str, float]:
    """The closed forms of the module docstring: billed output and input per request, the
    answered share and the mean latency of an answered request."""
    d = [1 + (N_OUT - 1) / 2**j if resume else float(N_OUT) for j in range(k + 1)]
    out = sum(r**j * ((1 - r) * d[j] + r * (d[j] - 1) / 2) for j in range(k + 1))
    inp = sum(r**j * (I_IN + N_OUT - d[j]) for j in range(k + 1))
    answered = 1 - r ** (k + 1)
    broken = [F + d[i] / (2 * S) for i in range(k + 1)]
    latency = (
        sum(r**j * (1 - r) * (sum(broken[:j]) + F + d[j] / S) for j in range(k + 1)) / answered
    )
    return {"output": out, "input": inp, "answered": answered, "latency": latency}


def per_request(calls: pd.DataFrame) -> pd.DataFrame:
    """Billed tokens per request, whether it answered, and its latency if it did."""
    grouped = calls.groupby("request_id")
    frame = grouped[["input_tokens", "output_tokens"]].sum()
    frame["answered"] = grouped["outcome"].agg(lambda o: (o == "ok").any())
    first = grouped["start_s"].min()  # no queue, no wait: the request's arrival
    frame["latency"] = grouped["end_s"].max() - first
    return frame


@pytest.mark.parametrize("resume", [False, True])
def test_billed_tokens_and_latency_meet_their_closed_forms(resume: bool) -> None:
    r, k = 0.5, 3
    policy = {"kind": "wait", "retries": k, "resume": resume}
    calls, _ = run_calls(one_step(serving(mid_stream_error_rate=r), policy), N)
    frame = per_request(calls)
    assert len(frame) == N
    want = expected(r, k, resume)

    def within(values: np.ndarray, target: float) -> None:
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert abs(values.mean() - target) < 4 * se, (values.mean(), target, se)

    within(frame["output_tokens"].to_numpy(float), want["output"])
    within(frame["input_tokens"].to_numpy(float), want["input"])
    # binomial SE of the answered share: sqrt(P (1 - P) / N) = 0.0038 at P = 15/16
    p = want["answered"]
    assert abs(frame["answered"].mean() - p) < 4 * math.sqrt(p * (1 - p) / N)
    within(frame.loc[frame["answered"], "latency"].to_numpy(float), want["latency"])


def test_resume_is_cheaper_and_faster_here_by_its_closed_forms() -> None:
    """The closed forms themselves: resuming bills fewer output tokens, more input tokens, and
    answers sooner at the same answered share."""
    off, on = expected(0.5, 3, False), expected(0.5, 3, True)
    assert on["output"] < off["output"]
    assert on["input"] > off["input"]
    assert on["latency"] < off["latency"]
    assert on["answered"] == off["answered"]


def test_a_resumed_call_sends_what_streamed_and_asks_for_the_rest_exactly() -> None:
    """Per call, exact: attempt j + 1 of a request whose attempt j broke at share u asks for
    D_{j+1} = D_j - int(D_j u) with input I + n - D_{j+1}; a broken call lasts f + D u / s."""
    policy = {"kind": "wait", "retries": 2, "resume": True}
    calls, bank = run_calls(one_step(serving(mid_stream_error_rate=0.9), policy, "full"), 300)
    checked = 0
    for rid, group in calls.groupby("request_id"):
        asked = N_OUT
        for row in group.sort_values("attempt").itertuples():
            assert row.input_tokens == I_IN + N_OUT - asked  # billing full: billed = asked
            assert row.output_tokens == asked
            if row.outcome == "broken":
                u = bank.uniform(int(rid), BREAK_AT, "s1", int(row.attempt), 0, 0)
                assert row.tokens_streamed == int(asked * u)
                assert math.isclose(row.end_s - row.start_s, F + asked / S * u, rel_tol=1e-9)
                asked -= int(asked * u)
                checked += 1
            else:
                assert row.outcome == "ok"
                assert math.isclose(row.end_s - row.start_s, F + asked / S, rel_tol=1e-9)
    assert checked > 300  # most requests break twice or more at r = 0.9


def test_an_idle_cut_resumes_from_the_stalls_onset() -> None:
    """Every call stalls 10 s mid-stream and is cut 3 s into it (`idle_timeout_s`): its retry
    asks for what came after the onset, with what came before it as prefill."""
    policy = {"kind": "wait", "retries": 1, "idle_timeout_s": 3.0, "resume": True}
    calls, bank = run_calls(one_step(stalled(), policy, "full"), 200)
    assert (calls["ended_by"] == "idle").all()
    for rid, group in calls.groupby("request_id"):
        first, second = group.sort_values("attempt").itertuples()
        streamed = int(N_OUT * bank.uniform(int(rid), ONSET, "s1", 0, 0, 0))
        assert first.tokens_streamed == streamed
        assert second.input_tokens == I_IN + streamed
        assert second.output_tokens == N_OUT - streamed


def test_no_token_no_resume_and_no_break_no_change() -> None:
    """A first-token cut streamed nothing: its retry starts over. Without a mid-stream end
    `resume` changes nothing: every call as without it, to the last bit; and the first
    attempts of a breaking stream are the same calls either way."""
    slow = serving(ttft=3.0)
    policy = {"kind": "wait", "retries": 2, "first_token_timeout_s": 2.0, "resume": True}
    calls, _ = run_calls(one_step(slow, policy), 100)
    assert (calls["ended_by"] == "first_token").all()
    assert (calls["input_tokens"] == I_IN).all()
    plain = one_step(serving(), {"kind": "wait", "retries": 2})
    resumed = one_step(serving(), {"kind": "wait", "retries": 2, "resume": True})
    pd.testing.assert_frame_equal(run_calls(plain, 500)[0], run_calls(resumed, 500)[0])
    breaking = serving(mid_stream_error_rate=0.3)
    off, _ = run_calls(one_step(breaking, {"kind": "wait", "retries": 2}), 500)
    on, _ = run_calls(one_step(breaking, {"kind": "wait", "retries": 2, "resume": True}), 500)
    pd.testing.assert_frame_equal(
        off[off["attempt"] == 0].reset_index(drop=True),
        on[on["attempt"] == 0].reset_index(drop=True),
    )


def test_resume_runs_on_the_event_engine_only() -> None:
    scenario = one_step(serving(mid_stream_error_rate=0.1), {"kind": "wait", "resume": True})
    policy = compile_scenario(scenario).policies["it"]
    assert "stream.resume" in {f.name for f in policy.features}
    assert qualify.qualifies(policy)[0] is False


def test_resume_takes_a_boolean() -> None:
    with pytest.raises(ScenarioError) as info:
        one_step(serving(), {"kind": "wait", "resume": "sometimes"})
    assert any(path == "policies.it.resume" for path, _ in info.value.problems)


def test_the_clients_own_retries_resend_the_resumed_request() -> None:
    """The provider SDK retries a 5xx of a resumed attempt with the same request: every call
    of one attempt that got served sends the same input, the one its policy attempt sent."""
    serve = serving(mid_stream_error_rate=0.5, error_rate=0.3)
    sdk = {"retries": 2, "retry_on": ["5xx"], "backoff": {"base_s": 0.5, "jitter": "none"}}
    providers = {"p1": {"serves": {"big": serve, "small": serving()}, "sdk": sdk}}
    scenario = build(
        [step("s1")],
        {"it": {"kind": "wait", "retries": 2, "resume": True}},
        providers=providers,
        billing={"cancelled": "elapsed"},
        arrivals={"kind": "poisson", "rate_per_s": 0.01},
    )
    calls, _ = run_calls(scenario, 400)
    served = calls[calls["outcome"] != "error"]  # an error bills (so records) no input
    sent = served.groupby(["request_id", "attempt"])["input_tokens"].nunique()
    assert (sent == 1).all()
    resent = served[(served["sdk_retry"] > 0) & (served["input_tokens"] > I_IN)]
    assert len(resent) > 10
