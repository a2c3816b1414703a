"""Every function of `sim.api` takes its scenario as a path, a Scenario, a Plan or None and its
folders and files as paths: anything else is a ScenarioError naming what is allowed, before any
work (never an AttributeError from deep inside)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sim
from sim import api
from sim.plan import compile_scenario

NOT_A_SCENARIO = 42

CALLS: dict[str, Callable[[Any, Path], Any]] = {
    "run": lambda bad, tmp: api.run(bad, requests=5),
    "run_to_folder": lambda bad, tmp: api.run_to_folder(bad, tmp / "r", requests=5),
    "sweep": lambda bad, tmp: api.sweep(bad, requests=5),
    "sweep_stored": lambda bad, tmp: api.sweep_stored(bad, tmp / "s", requests=5),
    "check": lambda bad, tmp: api.check(bad),
    "nines": lambda bad, tmp: api.nines(bad, budget_s=1),
    "nines_to_folder": lambda bad, tmp: api.nines_to_folder(bad, tmp / "n", budget_s=1),
    "stress": lambda bad, tmp: api.stress(bad, out=tmp / "x"),
    "tune": lambda bad, tmp: api.tune(bad, tmp / "t.yaml", requests=20),
    "synth": lambda bad, tmp: api.synth(bad, tmp / "calls.csv", requests=5),
    "fit": lambda bad, tmp: api.fit([bad]),
    "plot": lambda bad, tmp: api.plot(bad),
    "report": lambda bad, tmp: api.report(bad),
    "explain": lambda bad, tmp: api.explain(bad),
    "import_litellm": lambda bad, tmp: api.import_litellm(bad),
    "sim.run": lambda bad, tmp: sim.run(bad, requests=5),
    "sim.sweep": lambda bad, tmp: sim.sweep(bad, requests=5),
    "sim.nines": lambda bad, tmp: sim.nines(bad, budget_s=1),
    "sim.report": lambda bad, tmp: sim.report(bad),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_value_of_the_wrong_type_is_a_scenario_error_naming_what_is_allowed(
    name: str, tmp_path: Path
) -> None:
    with pytest.raises(sim.ScenarioError) as refused:
        CALLS[name](NOT_A_SCENARIO, tmp_path)
    message = refused.value.render()
    assert "expected" in message, message
    assert "got int 42" in message
    assert "path" in message  # what is allowed is named
    assert list(tmp_path.iterdir()) == []  # refused before any work


@pytest.mark.parametrize("form", ["str", "path", "scenario", "plan", "none"])
def test_a_path_a_scenario_a_plan_or_none_is_the_same_scenario(
    form: str, contract_path: Path
) -> None:
    scenario = sim.load_scenario(contract_path)
    given = {
        "str": str(contract_path),
        "path": contract_path,
        "scenario": scenario,
        "plan": compile_scenario(scenario),
        "none": None,  # the bundled default, which is this file's scenario
    }[form]
    same = ("name", "seed", "workflow", "policies", "providers")  # not where it was read from
    checked = api.check(given).scenario
    assert [getattr(checked, key) for key in same] == [getattr(scenario, key) for key in same]
    result = sim.run(given, requests=20, policies=["wait"])
    assert result.scenario.workflow == scenario.workflow
