"""The scenario is compiled once at the edge: outside the format (`sim/model/config`, its
loader `sim/model/scenario.py`), the compiler (`sim/plan`) and the two faces (`sim/api.py`,
`sim/cli`), no module of `sim/` imports or annotates `Scenario` (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "sim"
ALLOWED = ("model/config/", "model/scenario.py", "plan/", "api.py", "api/", "cli/", "__init__.py")


def _uses_scenario(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "Scenario" for a in node.names):
            return True
        if isinstance(node, ast.Name) and node.id == "Scenario":
            return True
    return False


def test_no_module_past_the_edge_takes_a_scenario() -> None:
    offenders = []
    for path in sorted(SIM.rglob("*.py")):
        rel = str(path.relative_to(SIM))
        if rel == "__init__.py" or any(rel.startswith(a) for a in ALLOWED if a != "__init__.py"):
            continue
        if _uses_scenario(ast.parse(path.read_text())):
            offenders.append(rel)
    assert not offenders, f"these take a Scenario, not a Plan: {offenders}"
