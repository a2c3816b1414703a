"""The package's shape: every module in a layer, no module past its size, the contracts run.

The layers themselves (no import from a lower layer to a higher one, no circles) are held by
import-linter (`lint-imports`, contracts in pyproject.toml), which .ci/run runs beside ruff.
These tests check what the contracts cannot see: that no module sits outside the layers (a
module at the top of `sim/` other than the CLI and the API would escape the layers contract),
that every layer says what it owns, and that no module grows past the size the architecture
allows without a reason written in docs/architecture.md.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

SIM = REPO_ROOT / "sim"
LAYERS = ("model", "policy", "plan", "analysis", "engine", "study", "output")
#: Features in wings of their own, above the layers and independent of each other.
WINGS = ("calibration", "rare", "adapters")
#: The faces on top, outside the layer folders (the layers contract names them as layers too).
TOP = {"__init__.py", "api", "cli"}
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(p for p in SIM.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_lives_in_a_layer_or_is_a_face() -> None:
    for path in _modules():
        first = path.relative_to(SIM).parts[0]
        assert first in LAYERS + WINGS or first in TOP or path.name == "__main__.py", (
            f"{path.relative_to(REPO_ROOT)} is in no layer: put it in one of {LAYERS + WINGS}"
        )


def test_the_layers_contract_names_every_layer_in_order() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    wings = " | ".join(f"sim.{name}" for name in WINGS)
    assert layers == ["sim.cli", "sim.api", wings, *(f"sim.{name}" for name in reversed(LAYERS))]
    assert any(c["type"] == "acyclic_siblings" for c in config["contracts"])


@pytest.mark.parametrize("layer", LAYERS + WINGS)
def test_each_layer_says_what_it_owns_and_may_import(layer: str) -> None:
    doc = ast.get_docstring(ast.parse((SIM / layer / "__init__.py").read_text()))
    assert doc, f"sim/{layer}/__init__.py has no docstring"
    assert "import" in doc, f"sim/{layer}/__init__.py must say what it may import"


def test_no_module_is_past_its_size_without_a_reason() -> None:
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    # the reasons are the rows of the section "Modules past 600 lines" (up to the next heading)
    section = re.search(r"^## Modules past 600 lines\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    architecture = section.group(1) if section else ""
    over = {
        str(p.relative_to(REPO_ROOT)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    unexplained = {
        path: n for path, n in over.items() if not re.search(rf"`{re.escape(path)}`", architecture)
    }
    assert not unexplained, f"over {MAX_LINES} lines, no reason in the docs: {unexplained}"


def test_ci_runs_the_import_contracts() -> None:
    assert "lint-imports" in (REPO_ROOT / ".ci" / "run").read_text()
