"""Per-step policies in whole runs: a step map runs each step with its own policy, and drawn
answer lengths vary per call and are common to every policy."""

from __future__ import annotations

import sim
from sim.plan import compile_scenario
from sim.policy.kinds.per_step import PerStep
from tests.helpers import build, step
from tests.policy.test_perstep import POLICIES, STEPS


def test_a_step_map_runs_each_step_with_its_own_policy() -> None:
    scenario = build(STEPS, POLICIES)
    runtime = compile_scenario(scenario).runtime("mixed")
    assert isinstance(runtime, PerStep)
    assert set(runtime.by_step) == {"a", "b", "c"}
    result = sim.run(scenario, requests=5, policies=["mixed"])
    calls = result.calls
    assert set(calls.loc[calls.step == "a", "provider"]) == {"p1", "p2"}  # raced
    assert set(calls.loc[calls.step == "b", "provider"]) == {"p1"}
    assert result.thresholds["mixed"] == {"b": 9.0}


def test_lengths_vary_per_call_and_are_common_to_every_policy() -> None:
    steps = [step("a", output_tokens={"median": 100, "p99": 400})]
    policies = {"wait": {"kind": "wait"}, "cut": {"kind": "cut", "cutoff": 50.0}}
    result = sim.run(build(steps, policies), requests=400)
    calls = result.calls
    wait = calls[calls.policy == "wait"].set_index("request_id")["output_tokens"]
    cut = calls[calls.policy == "cut"].set_index("request_id")["output_tokens"]
    assert (wait == cut).all()
    assert wait.nunique() > 50
    # median of 400 lognormal draws: standard error ~ 1.25 sigma m / sqrt(n) ~ 4 tokens
    assert abs(float(wait.median()) - 100) < 4 * 4
