"""sim.policy.perstep: per-step entries (names, overrides, whole policies, step maps) and their
errors. Whole runs of step maps are in tests/integration/test_perstep.py."""

from __future__ import annotations

import pytest

from sim.model.config import CutPolicy, RacePolicy, WaitPolicy
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from tests.helpers import build, scenario_dict, step

STEPS = [step("a"), step("b", "a"), step("c", "b", required=False)]
POLICIES = {
    "race": {"kind": "race", "providers": ["p1", "p2"]},
    "mixed": {
        "kind": "cut",
        "cutoff": 5.0,
        "retries": 2,
        "steps": {"a": "race", "b": {"cutoff": 9.0}, "c": {"kind": "wait"}},
    },
    "map": {"a": "race", "default": {"kind": "cut", "cutoff": 3.0}},
}


def test_entries_name_override_or_replace() -> None:
    plan = compile_scenario(build(STEPS, POLICIES))
    specs = {name: p.written for name, p in plan.policies.items()}
    assert isinstance(specs["mixed"]["a"], RacePolicy)
    assert specs["mixed"]["b"] == CutPolicy(kind="cut", cutoff=9.0, retries=2)
    assert specs["mixed"]["c"] == WaitPolicy(kind="wait")
    assert isinstance(specs["map"]["a"], RacePolicy)
    assert specs["map"]["b"] == specs["map"]["c"] == CutPolicy(kind="cut", cutoff=3.0)
    assert specs["race"]["b"] == RacePolicy(kind="race", providers=["p1", "p2"])


@pytest.mark.parametrize(
    ("policies", "path", "words"),
    [
        ({"x": {"kind": "wait", "steps": {"zz": "wait"}}}, "policies.x.steps.zz", "unknown step"),
        ({"x": {"kind": "wait", "steps": {"a": "nope"}}}, "policies.x.steps.a", "unknown policy"),
        (
            {
                "x": {"kind": "wait", "steps": {"a": "y"}},
                "y": {"kind": "wait", "steps": {"a": "x"}},
            },
            "policies.x.steps.a",
            "policy cycle",
        ),
        (
            {"x": {"kind": "cut", "cutoff": 2.0, "steps": {"a": {"cutof": 3}}}},
            "policies.x.steps.a.cutof",
            "unknown key",
        ),
        (
            {"x": {"kind": "cut", "cutoff": 2.0, "steps": {"a": {"cutoff": -1}}}},
            "policies.x.steps.a.cutoff",
            "seconds",
        ),
        (
            {"x": {"kind": "adaptive", "cutoff": 2.0, "fall_down": "tiny"}},
            "policies.x.fall_down",
            "unknown model",
        ),
        (
            {"x": {"kind": "cut", "cutoff": 2.0, "steps": {"a": {"kind": "draft", "model": "no"}}}},
            "policies.x.steps.a.model",
            "unknown model",
        ),
    ],
)
def test_bad_entries_name_their_key_path(policies: dict, path: str, words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(scenario_dict(STEPS, policies))
    assert any(p == path and words in m for p, m in caught.value.problems), caught.value.problems


def test_new_keys_default_to_the_old_behaviour() -> None:
    scenario = build(STEPS, {"wait": {"kind": "wait"}})
    assert scenario.quality_floor == 0.0
    spec = scenario.workflow.steps[0]
    assert (spec.output_tokens, spec.max_tokens, spec.validator) == (100, None, None)
    serving = scenario.providers["p1"].serves["big"]
    assert serving.ttft_s_per_ktok == 0.0


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"output_tokens": {"median": 100, "p99": 50}}, "workflow.steps[0].output_tokens.p99"),
        ({"max_tokens": 0}, "workflow.steps[0].max_tokens"),
        ({"validator": {"catches": 1.5}}, "workflow.steps[0].validator.catches"),
    ],
)
def test_bad_step_keys_name_their_path(change: dict, path: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(scenario_dict([dict(step("a"), **change)]))
    assert any(p.startswith(path) for p, _ in caught.value.problems), caught.value.problems
