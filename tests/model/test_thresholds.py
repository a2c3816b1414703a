"""Thresholds as a multiple of a pilot percentile (`after: 1.5 x p95`) and admission's expected
attempt time per step (`admission: {expected: {step: seconds or pNN, default: ...}}`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.model.thresholds import multiple_of, parse_threshold, percentile_of
from sim.policy.deadlines import admission_needs_pilot, resolve_expected, rules_for
from sim.study.pilot import resolve_specs, step_latencies
from tests.helpers import ScriptedBank, build, ok, scenario_dict, simulate, step

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


def test_tailsim_check_refuses_a_malformed_multiple_with_exit_2(tmp_path: Path) -> None:
    data = scenario_dict(policies={"h": {"kind": "hedge", "after": "1.5 x p950"}})
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(file)])
    assert result.exit_code == 2
    assert str(file) in result.output, result.output
    assert "policies.h.after" in result.output, result.output
    assert "Traceback" not in result.output


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
    specs = resolve_specs(scenario, 0, latencies)
    for s in ("s1", "s2"):
        assert specs["h"][s].after == pytest.approx(1.5 * np.percentile(latencies[s], 95))
        assert specs["c"][s].cutoff == pytest.approx(2 * np.median(latencies[s]))
        ttft = np.percentile(latencies[(s, "first-token")], 90)
        assert specs["a"][s].ttft_cutoff == pytest.approx(3 * ttft)
    assert specs["h"]["s1"].after != pytest.approx(specs["h"]["s2"].after)


def test_a_hedge_after_a_multiple_runs_alike_on_both_engines() -> None:
    """Two steps of different speed: the hedge delay is 1.5 x each step's own pilot p95 (the
    same pilot as plain p95), and the vectorized engine gives the event engine's tables."""
    law = {"ttft_s": {"median": 1.0, "p99": 6.0}, "tokens_per_s": {"median": 60, "p99": 120}}
    slow = {"ttft_s": {"median": 3.0, "p99": 12.0}, "tokens_per_s": {"median": 30, "p99": 60}}
    steps = [step("s1"), step("s2", "s1", model="small")]
    policies = {
        "p95": {"kind": "hedge", "after": "p95"},
        "scaled": {"kind": "hedge", "after": "1.5 x p95"},
    }
    providers = {"p1": {"serves": {"big": law, "small": slow}}}
    scenario = build(steps, policies, providers=providers, deadline_s=60.0)
    auto = sim.run(scenario, requests=300, seed=2)
    des = sim.run(scenario, requests=300, seed=2, engine="des")
    assert auto.engines == {"p95": "vectorized", "scaled": "vectorized"}
    assert des.engines == {"p95": "des", "scaled": "des"}
    for s in ("s1", "s2"):
        assert auto.thresholds["scaled"][s] == 1.5 * auto.thresholds["p95"][s]
    assert auto.thresholds["p95"]["s2"] > 2 * auto.thresholds["p95"]["s1"]
    for table in ("requests", "calls"):
        mine, theirs = getattr(auto, table), getattr(des, table)
        assert list(mine.columns) == list(theirs.columns)
        for column in mine.columns:
            if mine[column].dtype.kind == "f":
                np.testing.assert_allclose(mine[column], theirs[column], rtol=1e-12, atol=1e-12)
            else:
                assert mine[column].tolist() == theirs[column].tolist(), (table, column)
    fired = auto.calls.groupby("policy")["attempt"].max()
    assert fired["p95"] >= 1  # hedges do fire under both delays
    assert fired["scaled"] >= 1


# ----------------------------------------------------------------------------- admission per step


def test_one_expected_time_refuses_the_short_step_a_mapping_admits_it() -> None:
    """s1 takes 2 s, s2 0.5 s, deadline 4 s. `expected: 2.5` (sized for s1) refuses s2 at 2 s
    (2 s left <= 2.5) although it would end at 2.5 s; `{s1: 2.5, s2: 0.6}` admits it."""
    steps = [step("s1"), step("s2", "s1")]
    bank = ScriptedBank({("s1", 0): ok(1.0, 1.0), ("s2", 0): ok(0.25, 0.25)}, 1)
    one = build(steps, {"p": {"kind": "wait", "admission": {"expected": 2.5}}}, deadline_s=4.0)
    refused = simulate(one, "p", bank).requests.iloc[0]
    assert (refused["ok"], refused["fail_step"], refused["fail_reason"]) == (False, "s2", "refused")
    mapping = {"s1": 2.5, "s2": 0.6}
    spec = {"kind": "wait", "admission": {"expected": mapping}}
    per_step = build(steps, {"p": spec}, deadline_s=4.0)
    assert rules_for(per_step, "p").expected == mapping
    run = simulate(per_step, "p", bank).requests.iloc[0]
    assert run["ok"]
    assert run["refused_starts"] == 0
    assert run["latency_s"] == pytest.approx(2.5)
    # admission is the event engine's: forcing the vectorized one says so
    forced = build(steps, {"p": spec}, deadline_s=4.0, engine="vectorized")
    with pytest.raises(ScenarioError, match="admission"):
        sim.run(forced, requests=5)


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
    resolved = resolve_expected(scenario, latencies)
    p95_s2 = 1.5 * np.percentile(latencies["s2"], 95)
    assert resolved["listed"] == pytest.approx(
        {"s1": 2.0, "s2": p95_s2, "s3": np.median(latencies["s3"])}
    )
    assert resolved["default"]["s3"] == pytest.approx(np.percentile(latencies["s3"], 90))
    assert resolved["seconds"] == {"s1": 1.0, "s2": 3.0, "s3": 3.0}
    assert resolved["off"] is None
    assert admission_needs_pilot(scenario)
    seconds_only = build(steps, {"p": scenario.policies["seconds"]})
    assert not admission_needs_pilot(seconds_only)
    assert rules_for(seconds_only, "p").expected == {"s1": 1.0, "s2": 3.0, "s3": 3.0}
    # a step left out of an all-seconds mapping (no default) falls back to p50: pilot needed
    partial = build(steps, {"p": {"kind": "wait", "admission": {"expected": {"s1": 1.0}}}})
    assert admission_needs_pilot(partial)


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


def test_a_mapping_covers_tool_steps_from_their_pilot_actions() -> None:
    """A workflow with a tool step: the mapping's default (p95) resolves for the tool step from
    its pilot actions (submit to confirmation), the LLM step takes its own entry, and the run
    goes through (on the event engine, which runs admission and tool steps)."""
    tool = {
        "id": "act",
        "kind": "tool",
        "after": ["s1"],
        "tool": {"commit_s": {"median": 0.2, "p99": 0.8}, "confirm_s": {"median": 0.1, "p99": 0.5}},
    }
    admission = {"expected": {"s1": 2.5, "default": "p95"}}
    scenario = build([step("s1"), tool], {"p": {"kind": "wait", "admission": admission}})
    latencies = step_latencies(scenario, scenario.seed)
    resolved = resolve_expected(scenario, latencies)["p"]
    assert resolved is not None
    assert resolved["s1"] == 2.5
    assert resolved["act"] == pytest.approx(np.percentile(latencies["act"], 95))
    result = sim.run(scenario, requests=30)
    assert result.engines == {"p": "des"}
    assert result.summary["hit_rate"].iloc[0] > 0
