"""The `router` kind on a stream that breaks after its first chunk (`mid_stream_error_rate`), as
LiteLLM's Router handles `MidStreamFallbackError` (sim/policy/kinds/router.py, docs/clients.md
"On a stream"): counted against its deployment as a failure, never retried in its group; 1.80
walks the group's fallbacks, 1.110.2 only with `enable_mid_stream_fallback_continuation`, else the
error is the request's. Scripted calls (tests/policy/test_router.py's fake run) make the
timelines exact; a whole run of the event engine counts the calls a broken stream leads to."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import simpy

import sim
from sim.model.rows import OUTCOME_BROKEN, OUTCOME_ERROR, OUTCOME_OK
from sim.model.scenario import scenario_from_dict
from tests.policy.test_router import FakeRun, _router, _run

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


# ----------------------------------------------------------------------------- in the event engine


def _broken_run(rate: float, **router: Any) -> pd.DataFrame:
    """A whole run: group big on a (streams break at `rate`) and b, fallback group small on c."""
    law = {
        "ttft_s": {"dist": "constant", "value": 0.5},
        "tokens_per_s": {"median": 100, "p99": 200},
    }
    data = {
        "name": "broken",
        "seed": 3,
        "deadline_s": 60,
        "requests": 400,
        "arrivals": {"kind": "poisson", "rate_per_s": 2.0},
        "models": {"big": {}, "small": {}},
        "providers": {
            "a": {"serves": {"big": {**law, "mid_stream_error_rate": rate}}},
            "b": {"serves": {"big": law}},
            "c": {"serves": {"small": law}},
        },
        "workflow": {"steps": [{"id": "s1", "model": "big", "output_tokens": 50, "stream": True}]},
        "policies": {
            "litellm": {
                "kind": "router",
                "num_retries": 2,
                "fallbacks": {"big": ["small"]},
                "disable_cooldowns": True,  # every request sees the same two deployments
                **router,
            }
        },
    }
    result = sim.run(scenario_from_dict(data))
    assert result.engines["litellm"] == "des"
    return result.calls.sort_values(["request_id", "start_s"])


def _after_broken(calls: pd.DataFrame) -> pd.Series:
    """Per broken call: the providers of the calls its request made after it."""
    rows = []
    for _, request in calls.groupby("request_id"):
        providers, outcomes = list(request["provider"]), list(request["outcome"])
        for i, outcome in enumerate(outcomes):
            if outcome == OUTCOME_BROKEN:
                rows.append("".join(providers[i + 1 :]))
    return pd.Series(rows, dtype=object)


def test_in_the_engine_each_broken_stream_leads_to_one_fallback_call() -> None:
    calls = _broken_run(0.5, enable_mid_stream_fallback_continuation=True)
    after = _after_broken(calls)
    # seed 3 fixed; rate 0.5 on half the picks: broken calls ~ Binomial(400, 0.25), mean 100,
    # SE 8.7 (seed 3 gives 108); ">= 50" (5.8 SE below the mean) only guards against a run
    # with too few breaks to mean anything, the per-call checks are exact
    assert len(after) >= 50
    assert (after == "c").all()  # straight to small's c, never a retry on a or b
    assert (calls.loc[calls["provider"] == "c", "outcome"] == OUTCOME_OK).all()
    # without the continuation (1.110's default) a broken stream is the request's last call
    calls = _broken_run(0.5)
    after = _after_broken(calls)
    assert len(after) >= 50
    assert (after == "").all()
    assert (calls["provider"] != "c").all()


def test_in_the_engine_no_break_means_no_fallback_call() -> None:
    # mid_stream_error_rate 0: the same calls as before the rule, none on the fallback group
    calls = _broken_run(0.0, enable_mid_stream_fallback_continuation=True)
    assert (calls["outcome"] == OUTCOME_OK).all()
    assert (calls["provider"] != "c").all()
    pd.testing.assert_frame_equal(calls, _broken_run(0.0))
