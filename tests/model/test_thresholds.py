"""Thresholds as a multiple of a pilot percentile (`after: 1.5 x p95`, sim.model.thresholds) and
admission's expected attempt time per step (`admission: {expected: {step: seconds or pNN,
default: ...}}`): the forms, their errors and how they resolve. Whole runs with them are in
tests/integration/test_thresholds.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.model.thresholds import multiple_of, parse_threshold, percentile_of
from sim.plan import compile_scenario, needs_pilot, resolve
from tests.helpers import build, scenario_dict, step

# ----------------------------------------------------------------------------- K x pNN


@pytest.mark.parametrize(
    ("given", "kept", "multiple", "pct"),
    [
        ("1.5 x p95", "1.5xp95", 1.5, 95.0),
        ("1.5xp95", "1.5xp95", 1.5, 95.0),
        ("1.5*p95", "1.5xp95", 1.5, 95.0),
        (" 2 X p50 ", "2.0xp50", 2.0, 50.0),
        (".5 * p99.9", "0.5xp99.9", 0.5, 99.9),
        ("p90", "p90", 1.0, 90.0),
        (3, 3.0, 1.0, None),
    ],
)
def test_threshold_forms(given: Any, kept: Any, multiple: float, pct: float | None) -> None:
    value = parse_threshold(given)
    assert value == kept
    assert multiple_of(value) == multiple
    assert percentile_of(value) == pct


@pytest.mark.parametrize(
    "bad", ["0 x p95", "1.5 x p100", "x p95", "1.5 x 95", "p95 x 1.5", "-1xp95", "1.5 x p95 s"]
)
def test_a_malformed_multiple_is_an_error_at_its_key_path(bad: str) -> None:
    data = scenario_dict(policies={"h": {"kind": "hedge", "after": bad}})
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    rendered = caught.value.render()
    assert "policies.h.after:" in rendered, rendered
    assert repr(bad) in rendered, rendered
    assert "'1.5 x p95'" in rendered, rendered


def test_a_multiple_resolves_to_that_multiple_of_each_steps_percentile() -> None:
    """Given pilot samples, `1.5 x p95` is 1.5 times the step's own 95th percentile, for every
    threshold field (a hedge's `after`, a cut's `cutoff`, adaptive's `ttft_cutoff`)."""
    steps = [step("s1"), step("s2", "s1")]
    policies = {
        "h": {"kind": "hedge", "after": "1.5 x p95"},
        "c": {"kind": "cut", "cutoff": "2*p50"},
        "a": {"kind": "adaptive", "cutoff": 30, "ttft_cutoff": "3xp90", "reserve_s": 0},
    }
    scenario = build(steps, policies)
    rng = np.random.default_rng(5)
    latencies = {
        "s1": rng.lognormal(0.0, 0.5, 400),
        "s2": rng.lognormal(1.0, 0.8, 400),
        ("s1", "first-token"): rng.lognormal(-1.0, 0.3, 400),
        ("s2", "first-token"): rng.lognormal(-0.5, 0.3, 400),
    }
    specs = {n: p.specs for n, p in resolve(compile_scenario(scenario), latencies).policies.items()}
    for s in ("s1", "s2"):
        assert specs["h"][s].after == pytest.approx(1.5 * np.percentile(latencies[s], 95))
        assert specs["c"][s].cutoff == pytest.approx(2 * np.median(latencies[s]))
        ttft = np.percentile(latencies[(s, "first-token")], 90)
        assert specs["a"][s].ttft_cutoff == pytest.approx(3 * ttft)
    assert specs["h"]["s1"].after != pytest.approx(specs["h"]["s2"].after)


def test_a_mapping_resolves_each_step_from_its_entry_default_or_p50() -> None:
    steps = [step("s1"), step("s2", "s1"), step("s3", "s2")]
    expected = {"s1": 2.0, "s2": "1.5 x p95"}
    scenario = build(
        steps,
        {
            "listed": {"kind": "wait", "admission": {"expected": expected}},
            "default": {"kind": "wait", "admission": {"expected": {**expected, "default": "p90"}}},
            "seconds": {"kind": "wait", "admission": {"expected": {"s1": 1.0, "default": 3.0}}},
            "off": {"kind": "wait"},
        },
    )
    rng = np.random.default_rng(9)
    latencies = {s: rng.exponential(scale, 200) for s, scale in (("s1", 1), ("s2", 2), ("s3", 4))}
    plan = resolve(compile_scenario(scenario), latencies)
    resolved = {n: p.expected for n, p in plan.policies.items()}
    p95_s2 = 1.5 * np.percentile(latencies["s2"], 95)
    assert resolved["listed"] == pytest.approx(
        {"s1": 2.0, "s2": p95_s2, "s3": np.median(latencies["s3"])}
    )
    assert resolved["default"]["s3"] == pytest.approx(np.percentile(latencies["s3"], 90))
    assert resolved["seconds"] == {"s1": 1.0, "s2": 3.0, "s3": 3.0}
    assert resolved["off"] is None
    assert needs_pilot(compile_scenario(scenario))
    seconds_only = build(steps, {"p": scenario.policies["seconds"]})
    assert not needs_pilot(compile_scenario(seconds_only))
    expected = compile_scenario(seconds_only).policies["p"].rules.expected
    assert expected == {"s1": 1.0, "s2": 3.0, "s3": 3.0}
    # a step left out of an all-seconds mapping (no default) falls back to p50: pilot needed
    partial = build(steps, {"p": {"kind": "wait", "admission": {"expected": {"s1": 1.0}}}})
    assert needs_pilot(compile_scenario(partial))


@pytest.mark.parametrize(
    ("expected", "where", "fragment"),
    [
        ({"s1": 1.0, "s9": 2.0}, "policies.p.admission.expected.s9", "unknown step 's9'"),
        ({"s1": "1.5 x p100"}, "policies.p.admission.expected.s1", "'1.5 x p95'"),
        ({"default": True}, "policies.p.admission.expected.default", "seconds (> 0)"),
        ({}, "policies.p.admission.expected", "empty mapping"),
    ],
)
def test_a_bad_mapping_names_its_key_path(expected: Any, where: str, fragment: str) -> None:
    data = scenario_dict([step("s1")], {"p": {"kind": "wait", "admission": {"expected": expected}}})
    with pytest.raises(ScenarioError) as caught:
        scenario_from_dict(data)
    rendered = caught.value.render()
    assert f"{where}:" in rendered, rendered
    assert fragment in rendered, rendered
