"""`tailsim export`: a scenario's policy as the client code a team runs (`export openai`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.adapters.openai_export import OpenaiExport
from sim.adapters.openai_export import export_openai as _export_openai
from sim.api.inputs import ScenarioLike, optional_path, plan_of
from sim.model.errors import ScenarioError
from sim.study.pilot import prepare


def export_openai(
    scenario: ScenarioLike, policy: str, out: str | Path | None = None
) -> OpenaiExport:
    """Policy `policy` of `scenario` as openai client settings and an asyncio handler (its
    pilot thresholds resolved to seconds); written whole to `out` (a .py file) when given."""
    target = optional_path(out, "out")
    plan = plan_of(scenario)
    if policy not in plan.policies:
        allowed = ", ".join(plan.policies)
        raise ScenarioError(plan.source, [("policies", f"no policy {policy!r}; known: {allowed}")])
    resolved, _ = prepare(plan)
    exported = _export_openai(resolved, policy)
    if target is not None:
        _write(target, exported.code)
    return exported


def _write(path: Path, text: str) -> None:
    """Write `text` whole or not at all (a temporary file renamed into place)."""
    if not path.parent.is_dir():
        raise ScenarioError(str(path), [("", f"folder not found: {path.parent}")])
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
