"""The router kind in a whole run of the event engine: a cooldown holds for every request; a
broken stream leads to one fallback call, or none (tests/policy/test_router_broken.py)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

import sim
from sim.model.rows import OUTCOME_BROKEN, OUTCOME_OK
from sim.model.scenario import scenario_from_dict

# ----------------------------------------------------------------------------- in the event engine


def test_in_the_engine_a_cooldown_holds_for_every_request() -> None:
    """A whole run (event engine): with allowed_fails 0 every failed call on `a` cools it for
    5 s unless it is already cooling; replaying those cooldowns from the calls table, no call on
    `a` starts inside one, while other requests' calls go to `b` then. Exact: no statistics."""
    law = {
        "ttft_s": {"dist": "constant", "value": 0.5},
        "tokens_per_s": {"median": 100, "p99": 200},
    }
    data = {
        "name": "cooling",
        "seed": 4,
        "deadline_s": 60,
        "requests": 300,
        "arrivals": {"kind": "poisson", "rate_per_s": 4.0},
        "models": {"big": {}},
        "providers": {
            "a": {"serves": {"big": {**law, "error_rate": 0.3}}},
            "b": {"serves": {"big": law}},
        },
        "workflow": {"steps": [{"id": "s1", "model": "big", "output_tokens": 50}]},
        "policies": {
            "litellm": {
                "kind": "router",
                "routing_strategy": "least-busy",
                "allowed_fails": 0,
                "cooldown_time_s": 5.0,
                "num_retries": 1,
            }
        },
    }
    result = sim.run(scenario_from_dict(data))
    assert result.engines["litellm"] == "des"
    calls = result.calls
    on_a = calls[calls["provider"] == "a"]
    until, windows = -math.inf, []
    for end in sorted(on_a.loc[on_a["outcome"] == "error", "end_s"]):
        if end > until:  # a failure while cooling does not extend the cooldown
            until = end + 5.0
            windows.append((end, until))
    assert len(windows) >= 3
    starts_a = on_a["start_s"].to_numpy()
    starts_b = calls.loc[calls["provider"] == "b", "start_s"].to_numpy()
    for begin, end in windows:
        assert not ((starts_a >= begin) & (starts_a <= end)).any(), (begin, end)
        assert ((starts_b > begin) & (starts_b <= end)).any()  # other requests went to b


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
