"""A streaming step's client timeout is a read timeout (openai's `timeout` on `stream=True` is
httpx's read timeout, docs/clients.md): it bounds the wait for the first token, which the client
retries, and each silence mid-stream, which it does not; without `stream` it bounds the whole
call, as before. Constant first token (1 s) and generation (1 s for 100 tokens) make every
time exact but a mid-stream stall's onset, which is read back from the bank."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.model.stream import ONSET
from tests.engine.test_streams import run_calls
from tests.helpers import build, const, serving, step

SDK = {"preset": "openai", "timeout_s": 1.5}


def one_stream_step(serve: dict[str, Any], stream: bool = True) -> Any:
    """One step on p1 whose client is openai's with a 1.5 s timeout, under `wait` (no cut)."""
    providers = {"p1": {"serves": {"big": serve, "small": serving()}, "sdk": SDK}}
    return build(
        [step("s1", stream=stream)],
        {"it": {"kind": "wait"}},
        providers=providers,
        billing={"cancelled": "elapsed"},
        arrivals={"kind": "poisson", "rate_per_s": 0.01},
        deadline_s=600.0,
    )


def stalled(where: str) -> dict[str, Any]:
    """A 10 s stall on every call, before the first token or mid-stream."""
    return serving(stall={"probability": 1.0, "extra_s": const(10.0), "where": where})


def test_no_first_token_within_the_read_timeout_is_cut_and_retried_by_the_client() -> None:
    calls, _ = run_calls(one_stream_step(stalled("before_first_token")), 40)
    # openai retries a timeout twice: three calls per request, each cut 1.5 s after its send
    assert calls.groupby("request_id").size().eq(3).all()
    assert (calls["outcome"] == "timeout").all()
    assert (calls["ended_by"] == "sdk").all()
    assert (calls["tokens_streamed"] == 0).all()


def test_a_silence_mid_stream_past_the_read_timeout_is_cut_and_not_retried_by_the_client() -> None:
    calls, bank = run_calls(one_stream_step(stalled("mid_stream")), 40)
    assert calls.groupby("request_id").size().eq(1).all()  # after the headers: no SDK retry
    assert (calls["outcome"] == "timeout").all()
    assert (calls["ended_by"] == "idle").all()
    onset = np.asarray([bank.uniform(int(i), ONSET, "s1", 0, 0, 0) for i in calls["request_id"]])
    assert calls["tokens_streamed"].tolist() == (100 * onset).astype(np.int64).tolist()
    # it ends at first token (1 s) + the onset's share of generation (1 s) + the 1.5 s silence
    ended = (calls["end_s"] - calls["start_s"]).to_numpy()
    np.testing.assert_allclose(ended, 1.0 + onset + 1.5, rtol=1e-12)


def test_without_a_stream_the_timeout_bounds_the_whole_call() -> None:
    # a 2 s call under a 1.5 s total timeout: every call cut, and retried by the client
    calls, _ = run_calls(one_stream_step(serving(), stream=False), 20)
    assert calls.groupby("request_id").size().eq(3).all()
    assert (calls["ended_by"] == "sdk").all()
    # on a stream the same 2 s call never goes 1.5 s without a token: answered at once
    calls, _ = run_calls(one_stream_step(serving(), stream=True), 20)
    assert (calls["outcome"] == "ok").all()
    assert calls.groupby("request_id").size().eq(1).all()
