"""With the deadline propagated, no work outlives its request (issue 9), on random scenarios.

Scenarios come from the engine property tests' strategies (random DAGs, latencies, stalls,
errors, quotas, contention, every policy kind, customer re-sends) with issue 9's keys drawn on
top: step budgets, a reserve, admission by seconds, SDK retries, a tool step. The invariant:
no call or tool submit of a run starts after its deadline, and none is in flight after it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.model.config import Scenario
from tests.integration.property.test_engine_properties import (
    EPS_S,
    PROFILE,
    build,
    policies,
    servings,
    workflows,
)

#: Every test here draws many whole random scenarios (tests/README.md: what covers them).
pytestmark = pytest.mark.slow


@st.composite
def propagated_scenarios(draw: st.DrawFn) -> Scenario:
    """A contended random scenario with a finite deadline and deadline keys drawn."""
    steps = draw(workflows(("m", "small")))
    for spec in steps:
        if draw(st.booleans()):
            spec["budget_s"] = draw(st.floats(min_value=0.5, max_value=20.0))
        if draw(st.booleans()):
            spec["queue_budget_s"] = draw(st.floats(min_value=0.1, max_value=5.0))
    if draw(st.booleans()):
        steps.append(
            {
                "id": "tool",
                "kind": "tool",
                "after": [steps[-1]["id"]],
                "tool": {
                    "commit_s": {"median": 0.5, "p99": 5.0},
                    "confirm_s": {"median": 0.5, "p99": 8.0},
                    "idempotent": draw(st.booleans()),
                    "retries": draw(st.integers(min_value=0, max_value=2)),
                },
            }
        )
    named: dict[str, Any] = {}
    for i in range(draw(st.integers(min_value=1, max_value=2))):
        spec = draw(policies())
        if draw(st.booleans()):
            spec["admission"] = {"expected": draw(st.floats(min_value=0.1, max_value=5.0))}
        named[f"policy{i}"] = spec
    deadline = draw(st.floats(min_value=2.0, max_value=40.0))
    provider: dict[str, Any] = {
        "serves": {m: draw(servings()) for m in ("m", "small")},
        "concurrency": draw(st.integers(min_value=1, max_value=6)),
    }
    if draw(st.booleans()):
        provider["sdk"] = {"retries": 2, "backoff": {"base_s": 0.5, "max_s": 4.0}}
    scenario = build(
        steps,
        {"p1": provider, "p2": {"serves": {"m": draw(servings())}}},
        named,
        rate_per_s=draw(st.floats(min_value=0.2, max_value=3.0)),
        deadline_s=deadline,
        resend={"probability": 0.5, "max": 1, "delay_s": 1.0},
    )
    reserve = draw(st.sampled_from([0.0, 0.0, 0.3 * deadline]))
    data = scenario.model_dump(mode="json", exclude_none=True)
    data["workflow"]["reserve_s"] = reserve
    return Scenario.model_validate(data)


@settings(PROFILE, max_examples=40)
@given(scenario=propagated_scenarios(), seed=st.integers(min_value=0, max_value=2**31 - 1))
def test_with_propagation_no_work_outlives_its_request(scenario: Scenario, seed: int) -> None:
    result = sim.run(scenario, requests=40, seed=seed)
    keys = ["policy", "request_id", "resend"]
    deadline = result.requests.set_index(keys)["arrival_s"] + scenario.deadline_s
    calls = result.calls.join(deadline.rename("deadline_at"), on=keys)
    assert (calls["start_s"] <= calls["deadline_at"] + EPS_S).all(), "a call started late"
    assert (calls["end_s"] <= calls["deadline_at"] + EPS_S).all(), "a call outlived its request"
    assert not calls["orphan"].any()
    assert (result.summary["orphan_calls"] == 0).all()
    actions = result.actions.join(deadline.rename("deadline_at"), on=keys)
    sent = actions[actions["submitted_s"].notna()]
    assert (sent["submitted_s"] <= sent["deadline_at"] + EPS_S).all(), "a submit came late"
    answered = sent[sent["answered_s"].notna()]
    assert (answered["answered_s"] <= answered["deadline_at"] + EPS_S).all()
