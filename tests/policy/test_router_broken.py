"""The `router` kind on a stream that breaks after its first chunk (`mid_stream_error_rate`), as
LiteLLM's Router handles `MidStreamFallbackError` (sim/policy/kinds/router.py, docs/clients.md
"On a stream"): counted against its deployment as a failure, never retried in its group; 1.80
walks the group's fallbacks, 1.110.2 only with `enable_mid_stream_fallback_continuation`, else the
error is the request's. Scripted calls (tests/policy/test_router.py's fake run) make the
timelines exact, and LiteLLM's own Router over HTTP is held to them; a whole run of the event
engine counting the calls a broken stream leads to is in tests/integration/test_router.py."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

import pytest
import simpy

from sim.model.rows import OUTCOME_BROKEN, OUTCOME_ERROR, OUTCOME_OK
from tests.policy.test_router import FakeRun, _drive, _ours, _router, _run

EPS = 1e-9


def test_1110_raises_a_broken_stream_no_retry_no_fallback() -> None:
    router = _router(num_retries=2, fallbacks={"big": ["small"]})
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_BROKEN, "b": OUTCOME_OK, "c": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    assert result == [False]
    assert run.log == [(0.0, "a", OUTCOME_BROKEN)]
    # ... but counted against its deployment, as a server error is (`report_failure`)
    state = router.state(run.env)
    assert state.fails["big#0"][0] == 1
    assert "big#0" not in state.successes


@pytest.mark.parametrize(
    "keys", [{"litellm_version": "1.80"}, {"enable_mid_stream_fallback_continuation": True}]
)
def test_a_broken_stream_goes_straight_to_the_fallbacks(keys: dict[str, Any]) -> None:
    # no retry on b (the group's other, healthy deployment): the fallback group at once
    router = _router(num_retries=2, fallbacks={"big": ["small"]}, **keys)
    run = FakeRun(simpy.Environment(), {"a": OUTCOME_BROKEN, "b": OUTCOME_OK, "c": OUTCOME_OK})
    result = _run(router, run)
    run.env.run()
    assert result == [True]
    assert run.log == [(0.0, "a", OUTCOME_BROKEN), (1.0, "c", OUTCOME_OK)]


def test_a_fallback_whose_stream_breaks_ends_the_walk_that_reached_it() -> None:
    # big fails (a, b: errors, no retries) -> small; c's stream breaks and small has no
    # fallbacks: the error leaves the stream, so big's next fallback (tiny) is never tried
    script = {"a": OUTCOME_ERROR, "b": OUTCOME_ERROR, "c": OUTCOME_BROKEN, "d": OUTCOME_OK}
    keys = {"litellm_version": "1.80", "num_retries": 0, "fallbacks": {"big": ["small", "tiny"]}}
    run = FakeRun(simpy.Environment(), dict(script))
    result = _run(_router(**keys), run)
    run.env.run()
    assert result == [False]
    assert [p for _, p, _ in run.log] == ["a", "c"]
    # the same walk with an ordinary failure on c goes on to tiny
    run = FakeRun(simpy.Environment(), {**script, "c": OUTCOME_ERROR})
    result = _run(_router(**keys), run)
    run.env.run()
    assert result == [True]
    assert [p for _, p, _ in run.log] == ["a", "c", "d"]


def test_a_broken_stream_cools_its_deployment_down() -> None:
    # allowed_fails 0: the first counted failure cools a down for 5 s; the next request,
    # 2 s later, is routed to b although simple-shuffle's u = 0 picks a when both are healthy
    router = _router(allowed_fails=0, cooldown_time_s=5.0)
    env = simpy.Environment()
    first = FakeRun(env, {"a": OUTCOME_BROKEN, "b": OUTCOME_OK})
    second = FakeRun(env, {"a": OUTCOME_OK, "b": OUTCOME_OK})
    results = _run(router, first), _run(router, second, at=3.0)
    env.run()
    assert results == ([False], [True])
    assert router.state(env).cooldown_until["big#0"] == pytest.approx(6.0, abs=EPS)
    assert second.log == [(3.0, "b", OUTCOME_OK)]


# ----------------------------------------------------------------------------- against litellm

_CONTINUE = {"enable_mid_stream_fallback_continuation": True}
_SMALL = {"fallbacks": [{"big": ["small"]}]}
#: (deployments' streams: `break` after a first chunk, or `ok`; Router keys).
STREAMED: list[tuple[dict[str, str], dict[str, Any]]] = [
    ({"a": "break", "c": "ok"}, {"num_retries": 2, **_SMALL}),
    ({"a": "break", "c": "ok"}, {"num_retries": 2, **_SMALL, **_CONTINUE}),
    # b is healthy and num_retries 2, yet no retry in the group: the fallback at once, or none
    (
        {"a": "break", "b": "ok", "c": "ok"},
        {"routing_strategy": "least-busy", **_SMALL, **_CONTINUE},
    ),
    ({"a": "break", "b": "ok"}, {"routing_strategy": "least-busy", **_CONTINUE}),
]


@pytest.fixture(scope="module")
def streamed_results() -> tuple[str, list[Any]]:
    release = _release()
    jobs = [[plan, _keys_for(keys, release)] for plan, keys in STREAMED]
    return _drive("streamed", jobs)


def _release() -> str:
    """The installed litellm's release ("1.80", "1.110"), or "" if there is none."""
    if importlib.util.find_spec("litellm") is None:
        return ""
    return ".".join(importlib.metadata.version("litellm").split(".")[:2])


def _keys_for(keys: dict[str, Any], release: str) -> dict[str, Any]:
    """The Router's keys for `release` (1.80 has no continuation key: it always falls back)."""
    return {k: v for k, v in keys.items() if release != "1.80" or k not in _CONTINUE}


@pytest.mark.slow
@pytest.mark.parametrize(("plan", "keys"), STREAMED)
def test_litellms_own_router_on_a_broken_stream_calls_the_same(
    plan: dict[str, str], keys: dict[str, Any], streamed_results: Any
) -> None:
    """A stream broken after its first chunk over HTTP (SSE on loopback, free port) through
    litellm's Router and through the router kind set to that release: the same deployments
    called in order, the same end (the answer from the fallback, or the stream's error)."""
    release, results = streamed_results
    sleeps, called, answered = results[STREAMED.index((plan, keys))]
    outcome = {"break": OUTCOME_BROKEN, "ok": OUTCOME_OK}
    run = FakeRun(simpy.Environment(), {p: outcome[o] for p, o in plan.items()}, seconds=0.0)
    result = _run(_router(**_ours(_keys_for(keys, release), plan), litellm_version=release), run)
    run.env.run()
    assert sleeps == []
    assert [p for _, p, _ in run.log] == called
    assert result == [answered]
