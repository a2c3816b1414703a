"""The router kind in a whole run of the event engine: a cooldown holds for every request."""

from __future__ import annotations

import math

import sim
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
