"""Percentile multiples and per-step admission on whole runs: `tailsim check` refuses a malformed
multiple with exit 2, a hedge after a multiple runs alike on both engines, one expected time
refuses the short step a mapping admits, and a mapping covers tool steps from their pilot
actions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.model.errors import ScenarioError
from sim.plan import compile_scenario, resolve
from sim.study.pilot import measure
from tests.helpers import ScriptedBank, build, ok, scenario_dict, simulate, step


def test_tailsim_check_refuses_a_malformed_multiple_with_exit_2(tmp_path: Path) -> None:
    data = scenario_dict(policies={"h": {"kind": "hedge", "after": "1.5 x p950"}})
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(file)])
    assert result.exit_code == 2
    assert str(file) in result.output, result.output
    assert "policies.h.after" in result.output, result.output
    assert "Traceback" not in result.output


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
    assert compile_scenario(per_step).policies["p"].rules.expected == mapping
    run = simulate(per_step, "p", bank).requests.iloc[0]
    assert run["ok"]
    assert run["refused_starts"] == 0
    assert run["latency_s"] == pytest.approx(2.5)
    # admission is the event engine's: forcing the vectorized one says so
    forced = build(steps, {"p": spec}, deadline_s=4.0, engine="vectorized")
    with pytest.raises(ScenarioError, match="admission"):
        sim.run(forced, requests=5)


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
    latencies = measure(compile_scenario(scenario))
    resolved = resolve(compile_scenario(scenario), latencies).policies["p"].expected
    assert resolved is not None
    assert resolved["s1"] == 2.5
    assert resolved["act"] == pytest.approx(np.percentile(latencies["act"], 95))
    result = sim.run(scenario, requests=30)
    assert result.engines == {"p": "des"}
    assert result.summary["hit_rate"].iloc[0] > 0
