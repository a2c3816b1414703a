"""Shared fixtures: the public contract scenario, and writing edited copies of it to tmp_path."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

# Property tests draw the same examples on every run (CI included): a failure is reproducible,
# never a flake. HYPOTHESIS_PROFILE=explore searches afresh, for hunting bugs locally. No profile
# times anything: no per-example deadline and no too-slow health check (both measure wall time,
# which a loaded machine stretches).
_NO_WALL_CLOCK: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("fixed", derandomize=True, database=None, **_NO_WALL_CLOCK)
settings.register_profile("explore", **_NO_WALL_CLOCK)
#: The engine property tests' profiles (tests/property/conftest.py) select the matching global one.
_GLOBAL_PROFILE = {"ci": "fixed", "dev": "explore"}
_profile = os.environ.get("HYPOTHESIS_PROFILE") or "fixed"
settings.load_profile(_GLOBAL_PROFILE.get(_profile, _profile))

#: The repository (the folder holding `sim/` and `tests/`).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The public contract example, bundled as the default scenario (a user's clone has nothing beside
#: it, so tests never read outside the repository).
CONTRACT_PATH = REPO_ROOT / "scenarios" / "default.yaml"

_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")

#: An edit mapping a key path to this value deletes the key instead of setting it.
DELETE: Any = ...

WriteYaml = Callable[..., Path]
ScenarioFile = Callable[..., Path]


def key_path_parts(path: str) -> list[str | int]:
    """'workflow.steps[3].after[0]' -> ['workflow', 'steps', 3, 'after', 0], as in messages."""
    parts: list[str | int] = []
    for name, index in _KEY_PART.findall(path):
        parts.append(int(index) if index else name)
    if not parts:
        raise ValueError(f"empty key path {path!r}")
    return parts


def edit_key_path(data: Any, path: str, value: Any) -> None:
    """Set (or, with `...` as value, delete) `path` in nested dicts and lists, in place.

    A list index equal to the list's length appends; missing mapping keys on the way are created.
    """
    *head, last = key_path_parts(path)
    node = data
    for part in head:
        node = node[part] if isinstance(part, int) else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    elif isinstance(last, int) and last == len(node):
        node.append(value)
    else:
        node[last] = value


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
