"""Fixtures and hypothesis profiles every test folder shares: the public contract scenario, and
writing edited copies of it to tmp_path (plain helpers live in tests/helpers.py)."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

from tests.helpers import CONTRACT_PATH, REPO_ROOT, ScenarioFile, WriteYaml, edit_key_path

# Property tests draw the same examples on every run (CI included): a failure is reproducible,
# never a flake. HYPOTHESIS_PROFILE=explore searches afresh, for hunting bugs locally. No profile
# times anything: no per-example deadline and no too-slow health check (both measure wall time,
# which a loaded machine stretches).
_NO_WALL_CLOCK: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("fixed", derandomize=True, database=None, **_NO_WALL_CLOCK)
settings.register_profile("explore", **_NO_WALL_CLOCK)

# The profiles the engine property tests apply test by test (`@settings.get_profile(...)`, in any
# folder): "ci" (the default: derandomized, no example database, the same examples every run)
# and "dev" (`HYPOTHESIS_PROFILE=dev`: new examples every run, failures kept in .hypothesis/).
# An example is a whole simulation, hence no deadline and no data-too-large check either. They
# are registered here, at the root, so a test in any folder can pick one, and not loaded
# globally (that would change how many examples every other hypothesis test runs).
_WHOLE_SIMULATION = {
    "deadline": None,
    "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large),
}
settings.register_profile("dev", max_examples=40, print_blob=True, **_WHOLE_SIMULATION)
settings.register_profile(
    "ci", max_examples=120, derandomize=True, database=None, print_blob=True, **_WHOLE_SIMULATION
)
#: HYPOTHESIS_PROFILE names an engine profile ("ci", "dev") or a global one ("fixed",
#: "explore"); the engine profiles select the matching global one.
_GLOBAL_PROFILE = {"ci": "fixed", "dev": "explore"}
_profile = os.environ.get("HYPOTHESIS_PROFILE") or "fixed"
settings.load_profile(_GLOBAL_PROFILE.get(_profile, _profile))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository folder (holding `sim/`, `scenarios/` and `tests/`)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def contract_path() -> Path:
    """The public contract example, bundled as `scenarios/default.yaml`."""
    assert CONTRACT_PATH.is_file(), f"the bundled default scenario is missing: {CONTRACT_PATH}"
    return CONTRACT_PATH


@pytest.fixture
def contract_data(contract_path: Path) -> dict[str, Any]:
    """A fresh, mutable copy of the contract scenario as plain data (yaml.safe_load)."""
    return yaml.safe_load(contract_path.read_text(encoding="utf-8"))


@pytest.fixture
def write_yaml(tmp_path: Path) -> WriteYaml:
    """Write a YAML document to a file under tmp_path: `write_yaml(data, name="scenario.yaml")`.

    `name` may contain folders (created as needed); the written path is returned.
    """

    def write(data: Any, name: str = "scenario.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture
def scenario_file(contract_data: dict[str, Any], write_yaml: WriteYaml) -> ScenarioFile:
    """Write the contract with edits applied: `scenario_file({"seed": 3, "name": ...})`.

    Keys are key paths as in error messages (`workflow.steps[3].after`); a value of `...` deletes
    the key. Each call starts again from the unedited contract.
    """

    def write(edits: Mapping[str, Any] | None = None, name: str = "scenario.yaml") -> Path:
        data = copy.deepcopy(contract_data)
        for path, value in (edits or {}).items():
            edit_key_path(data, path, value)
        return write_yaml(data, name)

    return write
