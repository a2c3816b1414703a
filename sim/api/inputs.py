"""What every API function accepts as its scenario: a YAML path, a `Scenario`, a compiled `Plan`
(where a function takes one) or None for the bundled default; anything else is refused with a
`ScenarioError` naming what is allowed."""

from __future__ import annotations

from pathlib import Path

from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import default_scenario_path, load_scenario
from sim.plan import Plan, compile_scenario

#: The scenario a caller may pass: a path, a loaded Scenario, a compiled Plan, or None (default).
ScenarioLike = Plan | Scenario | str | Path | None


def _refuse(value: object, what: str, allowed: str) -> ScenarioError:
    """The error for a `what` argument of the wrong type, naming what is allowed."""
    return ScenarioError(
        what, [("", f"expected {allowed}, got {type(value).__name__} {value!r:.60}")]
    )


def source_of(scenario: ScenarioLike) -> str:
    """How to name where `scenario` came from in messages and run.json (its path, or its name)."""
    if isinstance(scenario, Plan | Scenario):
        return scenario.name
    if scenario is None:
        return str(default_scenario_path())
    return str(scenario)


def plan_of(scenario: ScenarioLike, what: str = "scenario") -> Plan:
    """The compiled plan of a Plan, a Scenario, a YAML path, or (None) the bundled default."""
    if isinstance(scenario, Plan):
        return scenario
    if isinstance(scenario, Scenario):
        return compile_scenario(scenario)
    if scenario is None or (isinstance(scenario, str | Path) and not isinstance(scenario, bool)):
        return compile_scenario(load_scenario(scenario))
    raise _refuse(scenario, what, "a scenario YAML path (str or Path), a Scenario, a Plan or None")


def scenario_path(scenario: object, what: str = "scenario") -> Path:
    """`scenario` as the path of a YAML file (for what reads the file itself, as tune does)."""
    if isinstance(scenario, str | Path):
        return Path(scenario)
    raise _refuse(scenario, what, "a scenario YAML path (str or Path)")


def file_path(value: object, what: str) -> Path:
    """`value` as a file or folder path (str or Path), refused otherwise."""
    if isinstance(value, str | Path):
        return Path(value)
    raise _refuse(value, what, "a path (str or Path)")


def optional_path(value: object, what: str) -> Path | None:
    """`value` as a path, or None."""
    return None if value is None else file_path(value, what)
