"""`fit --workflow`: a runnable scenario inferred from workflow traces (OTLP JSON or a span CSV).

The structure (steps, `after`, retries, loop / when / map keys, sizes, deadline) comes from
`sim.calibration.workflow_fit`; the latency blocks from `fit`'s own code over the traces' call
spans as a call log; the arrivals from the root spans' starts, as a trace CSV beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sim.api.calibration import fit_frame
from sim.api.inputs import file_path, optional_path
from sim.model.errors import ScenarioError


@dataclass(frozen=True)
class WorkflowFitted:
    """The inferred workflow: the report (lines for people, data for JSON), the scenario's
    text, and the files written (none without `out`)."""

    lines: list[str]
    report: dict[str, Any]
    scenario: str
    written: list[Path]


def _targets(out: Path) -> dict[str, Path]:
    stem = out.with_suffix("")
    return {
        "scenario": out,
        "providers": stem.with_name(stem.name + ".providers.yaml"),
        "arrivals": stem.with_name(stem.name + ".arrivals.csv"),
        "markdown": stem.with_name(stem.name + ".workflow.md"),
        "json": stem.with_name(stem.name + ".workflow.json"),
    }


def fit_workflow(
    traces: str | Path,
    out: str | Path | None = None,
    *,
    deadline_s: float | None = None,
    min_calls: int = 20,
    extras: bool = True,
    seed: int = 0,
    say: Callable[[str], None] | None = None,
) -> WorkflowFitted:
    """Infer the workflow of `traces` and (with `out`) write the scenario there, beside it
    OUT.providers.yaml (the fitted latency blocks, as `fit --out` writes them, with their
    report tables and figure), OUT.arrivals.csv (the root spans' starts) and the report as
    OUT.workflow.md and OUT.workflow.json. Bad traces: a ScenarioError naming the file and
    the trace or span, nothing written."""
    from sim.calibration.calllog import Garbage  # noqa: PLC0415
    from sim.calibration.otlp import read_otlp_log  # noqa: PLC0415 - the fit's code on demand
    from sim.calibration.workflow_fit import infer_workflow  # noqa: PLC0415
    from sim.calibration.workflow_spans import read_spans, spans_to_log, step_spans  # noqa: PLC0415

    path = file_path(traces, "workflow")
    out_file = optional_path(out, "out")
    if out_file is not None and (out_file.is_dir() or not out_file.absolute().parent.is_dir()):
        raise ScenarioError(str(out_file), [("", "is a folder or its folder does not exist")])
    if deadline_s is not None and not deadline_s > 0:
        raise ScenarioError("deadline_s=", [("", f"must be above 0, got {deadline_s:g}")])
    table = read_spans(path)
    roots, steps = step_spans(table)
    if steps.empty:
        raise ScenarioError(str(path), [("", "no call spans under the root spans")])
    seen = infer_workflow(roots, steps, deadline_s)
    if path.suffix.lower() == ".csv":
        calls = spans_to_log(steps)
    else:
        calls = read_otlp_log(path, Garbage())
        calls = calls[calls["request_id"].isin(set(steps["trace_id"]))].reset_index(drop=True)
    ok = calls[calls["status"] == "ok"]
    for step in seen.steps:
        mine = ok["model"] == step.model
        if step.provider is not None:
            mine &= ok["provider"] == step.provider
        if int(mine.sum()) < min_calls:
            raise ScenarioError(
                str(path),
                [("", f"step {step.id}: {int(mine.sum())} ok calls of model {step.model}, "
                      f"fewer than {min_calls}: its latency cannot be fitted")],
            )  # fmt: skip
    targets = _targets(out_file) if out_file is not None else None
    scenario = _scenario(seen, path, targets)
    text = _scenario_text(scenario, seen, path)
    report = seen.report()
    lines = seen.lines()
    if targets is None:
        return WorkflowFitted(lines, report, text, [])
    fitted = fit_frame(
        calls, str(path), [str(path)], targets["providers"], min_calls=min_calls,
        extras=extras, seed=seed, tell=say or (lambda _line: None),
    )  # fmt: skip
    arrivals = pd.DataFrame({"TIMESTAMP": seen.arrivals_s})
    files = {
        targets["arrivals"]: arrivals.to_csv(index=False, float_format="%.9f"),
        targets["markdown"]: _markdown(lines, path),
        targets["json"]: json.dumps(report, indent=2, default=float) + "\n",
        targets["scenario"]: text,
    }
    for target, content in files.items():
        temp = target.with_name(target.name + ".tmp")
        temp.write_text(content, encoding="utf-8")
        temp.replace(target)
    return WorkflowFitted(lines, report, text, [*fitted.written, *files])


def _scenario(seen: Any, path: Path, targets: dict[str, Path] | None) -> dict[str, Any]:
    """The scenario as data: the inferred workflow, policy, deadline and trace arrivals."""
    longest = float(seen.arrivals_s.max()) if len(seen.arrivals_s) else 0.0
    scenario: dict[str, Any] = {
        "name": seen.name,
        "description": f"Inferred by tailsim fit --workflow from {path.name} "
        f"({seen.traces} traces, {longest:.0f} s of arrivals).",
        "seed": 0,
        "requests": seen.traces,
    }
    if targets is not None:
        scenario["include"] = targets["providers"].name
    scenario["deadline_s"] = seen.deadline_s if seen.deadline_s is not None else 1e6
    scenario["arrivals"] = {
        "kind": "trace",
        "file": targets["arrivals"].name if targets is not None else "ARRIVALS.csv",
        "column": "TIMESTAMP",
    }
    scenario["workflow"] = {"steps": [s.step() for s in seen.steps]}
    scenario["policies"] = {"traced": seen.policy()}
    return scenario


def _scenario_text(scenario: dict[str, Any], seen: Any, path: Path) -> str:
    """The scenario's YAML, its header saying where it came from and how sure it is."""
    head = [f"# Inferred by `tailsim fit --workflow {path.name}` (report: the .workflow.md beside)"]
    head += [f"#   {line}" for line in seen.lines()]
    body = yaml.safe_dump(scenario, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(head) + "\n" + body


def _markdown(lines: list[str], path: Path) -> str:
    """The report as markdown."""
    out = [f"# Workflow inferred from {path.name}", ""]
    out += [f"- {line.strip()}" for line in lines]
    return "\n".join(out) + "\n"
