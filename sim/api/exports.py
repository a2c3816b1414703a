"""`tailsim export`: a scenario's policy as the client code a team runs (`export openai`)."""

from __future__ import annotations

from pathlib import Path

from sim.adapters.openai_export import OpenaiExport
from sim.adapters.openai_export import export_openai as _export_openai
from sim.api.imports import write_whole
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
        if not target.parent.is_dir():
            raise ScenarioError(str(target), [("", f"folder not found: {target.parent}")])
        write_whole(target, exported.code)
    return exported
