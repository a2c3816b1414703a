"""The client presets' streaming rules (docs/clients.md "On a stream") and `sdk.stream_timeout_s`,
LiteLLM's `stream_timeout`: on a streamed step it replaces `timeout_s` as the read timeout (the
first-token cut the client retries, the idle cut it does not); off a stream, and unset, nothing
moves. Constant first token (1 s) and generation (1 s for 100 tokens) make every time exact but a
mid-stream stall's onset, read back from the bank (as tests/engine/test_stream_client.py)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.engine import qualify
from sim.model.config import SdkSpec
from sim.model.config.sdk import PRESETS
from sim.model.errors import ScenarioError
from sim.model.stream import ONSET
from sim.plan import compile_scenario
from tests.engine.test_streams import run_calls
from tests.helpers import build, const, serving, step


def litellm_step(serve: dict[str, Any], sdk: dict[str, Any], stream: bool = True) -> Any:
    """One step on p1 whose client is LiteLLM's with `sdk` laid over it, under `wait` (no cut)."""
    providers = {
        "p1": {"serves": {"big": serve, "small": serving()}, "sdk": {"preset": "litellm", **sdk}}
    }
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


#: LiteLLM's stream_timeout of 1.5 s under a request timeout (100 s) that binds nothing here.
STREAM = {"timeout_s": 100.0, "stream_timeout_s": 1.5}


@pytest.mark.parametrize("name", ["none", "openai", "anthropic", "litellm"])
def test_no_preset_has_a_stream_timeout_of_its_own(name: str) -> None:
    # read from source (sim/model/config/sdk.py): openai and anthropic keep `timeout` as the
    # stream's read timeout; LiteLLM's stream_timeout is unset by default (falls back to timeout)
    assert PRESETS[name]["stream_timeout_s"] is None
    assert SdkSpec.model_validate(name).stream_timeout_s is None


def test_litellm_stream_timeout_replaces_the_request_timeout_on_a_live_stream_only() -> None:
    # the rule the key encodes, checked against the installed LiteLLM where there is one
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
    module = pytest.importorskip("litellm.litellm_core_utils.completion_timeout")
    timeout, kind = module.CompletionTimeout, module.StreamKind
    assert timeout.for_stream(kind.LIVE, 600.0, 1.5) == 1.5
    assert timeout.for_stream(kind.LIVE, 600.0, None) == 600.0  # unset: the request timeout
    assert timeout.for_stream(kind.NOT_STREAMED, 600.0, 1.5) == 600.0


def test_no_first_token_within_the_stream_timeout_is_cut_and_retried_by_the_client() -> None:
    calls, _ = run_calls(litellm_step(stalled("before_first_token"), STREAM), 40)
    # LiteLLM's client retries a timeout twice: three calls, each cut 1.5 s after its send
    assert calls.groupby("request_id").size().eq(3).all()
    assert (calls["outcome"] == "timeout").all()
    assert (calls["ended_by"] == "sdk").all()
    np.testing.assert_allclose((calls["end_s"] - calls["start_s"]).to_numpy(), 1.5, rtol=1e-12)


def test_a_silence_mid_stream_past_the_stream_timeout_is_cut_and_not_retried() -> None:
    calls, bank = run_calls(litellm_step(stalled("mid_stream"), STREAM), 40)
    assert calls.groupby("request_id").size().eq(1).all()
    assert (calls["ended_by"] == "idle").all()
    onset = np.asarray([bank.uniform(int(i), ONSET, "s1", 0, 0, 0) for i in calls["request_id"]])
    ended = (calls["end_s"] - calls["start_s"]).to_numpy()
    np.testing.assert_allclose(ended, 1.0 + onset + 1.5, rtol=1e-12)  # first token, onset, 1.5 s


def test_off_a_stream_the_stream_timeout_changes_nothing() -> None:
    # a 2 s call: a 1.5 s stream_timeout does not bind a non-streamed step; timeout_s 1.5 does
    serve = serving()
    calls, _ = run_calls(litellm_step(serve, STREAM, stream=False), 20)
    assert (calls["outcome"] == "ok").all()
    calls, _ = run_calls(litellm_step(serve, {"timeout_s": 1.5}, stream=False), 20)
    with_key, _ = run_calls(
        litellm_step(serve, {"timeout_s": 1.5, "stream_timeout_s": 50.0}, stream=False), 20
    )
    assert (calls["ended_by"] == "sdk").all()
    pd.testing.assert_frame_equal(calls, with_key)


@pytest.mark.parametrize("where", ["before_first_token", "mid_stream"])
def test_unset_the_stream_uses_timeout_s_bit_for_bit(where: str) -> None:
    # unset, or set to timeout_s itself: the same calls, to the last bit, as before the key
    before, _ = run_calls(litellm_step(stalled(where), {"timeout_s": 1.5}), 40)
    unset, _ = run_calls(
        litellm_step(stalled(where), {"timeout_s": 1.5, "stream_timeout_s": None}), 40
    )
    same, _ = run_calls(
        litellm_step(stalled(where), {"timeout_s": 1.5, "stream_timeout_s": 1.5}), 40
    )
    pd.testing.assert_frame_equal(before, unset)
    pd.testing.assert_frame_equal(before, same)


def test_a_stream_timeout_alone_cuts_a_stream_whose_client_has_no_timeout() -> None:
    calls, _ = run_calls(
        litellm_step(stalled("mid_stream"), {"timeout_s": None, "stream_timeout_s": 1.5}), 20
    )
    assert (calls["ended_by"] == "idle").all()


def test_a_stream_timeout_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"providers\.p1\.sdk\.stream_timeout_s"):
        litellm_step(serving(), {"stream_timeout_s": 0})


def test_a_stream_timeout_keeps_the_policy_on_the_event_engine() -> None:
    """The vectorized engine folds only `timeout_s` into a stream's cuts, so a provider with a
    stream timeout of its own names the feature it lacks, and `engine: auto` falls back."""
    policy = compile_scenario(litellm_step(stalled("mid_stream"), STREAM)).policies["it"]
    assert "client.stream_timeout" in {f.name for f in policy.features}
    ok, why = qualify.qualifies(policy)
    assert not ok
    assert "stream_timeout_s" in why
    plain = compile_scenario(litellm_step(stalled("mid_stream"), {"timeout_s": 1.5})).policies
    assert qualify.qualifies(plain["it"]) == (True, "")
