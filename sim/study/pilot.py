"""The pilot run: measure each step's latency first, then turn 'pNN' thresholds into seconds.

As the article prescribes, cutoffs are not guessed: the workflow is run under a plain wait policy
(no timeouts, no retries, no deadline, no step budgets) on its own random streams, every
step's successful call latencies (queue wait included) are recorded, and 'p95' becomes that
step's 95th percentile (for `ttft_cutoff`, of its first-token latency). The pilot also gives
`adaptive` its default `reserve_s`: the sum of median latencies along the longest path of steps
after a step, and deadline-aware admission its expected attempt time per step.

A tool step (`kind: tool`) makes no LLM call: the engine runs it under its own budgets, never a
policy, so a policy's thresholds (`cutoff`, `after`, ...) apply to no call of it and are not
resolved for it (its spec is kept as written, and it has no runtime plan). Admission's expected
time does apply to tool submits: `sim.policy.deadlines.resolve_expected` measures it for every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.engine.simulation import Simulation, serving_latencies
from sim.model.arrivals import arrival_times
from sim.model.config import (
    THRESHOLD_FIELDS,
    AdaptivePolicy,
    PlainPolicy,
    Scenario,
    WaitPolicy,
)
from sim.model.errors import ScenarioError, format_path
from sim.model.provider import OUTCOME_OK
from sim.model.rows import CONFIRMED
from sim.model.streams import CallDrawBank, Streams
from sim.model.thresholds import percentile_of, seconds_of
from sim.model.workflow import Workflow
from sim.policy.build import build_policy
from sim.policy.deadlines import without_budgets
from sim.policy.perstep import effective_specs

#: Suffix of the first-token samples in `step_latencies(..., first_token=True)`.
TTFT_SAMPLE = "first-token"


def tool_steps(scenario: Scenario) -> frozenset[str]:
    """Ids of the scenario's tool steps: run by the engine, so no policy threshold applies."""
    return frozenset(s.id for s in scenario.workflow.steps if s.kind == "tool")


def needs_pilot(scenario: Scenario) -> bool:
    """True if any policy (at any LLM step) names a percentile threshold or runs `adaptive`
    without its own `reserve_s`."""
    tools = tool_steps(scenario)
    for per_step in effective_specs(scenario).values():
        for step, spec in per_step.items():
            if step in tools:
                continue
            if isinstance(spec, AdaptivePolicy) and spec.reserve_s is None:
                return True
            for field in THRESHOLD_FIELDS.get(type(spec), ()):
                value = getattr(spec, field)
                if value is not None and percentile_of(value) is not None:
                    return True
    return False


def step_latencies(
    scenario: Scenario, seed: int, first_token: bool = False
) -> dict[Any, np.ndarray]:
    """Successful call latencies (seconds, queue included) per step in a pilot run (for a tool
    step, confirmed actions' time from submit to confirmation); with `first_token`, also their
    first-token latencies under the key (step, TTFT_SAMPLE)."""
    streams = Streams(seed, "pilot")
    n = scenario.pilot.requests
    scenario = without_budgets(scenario)
    workflow = Workflow.from_scenario(scenario)
    wait = build_policy("pilot", WaitPolicy(kind="wait"), scenario, workflow.steps, {})
    sim = Simulation(
        scenario,
        wait,
        CallDrawBank(streams.child("calls"), n),
        streams,
        deadline_s=float("inf"),
        latencies=serving_latencies(scenario),
    )
    records = sim.run(arrival_times(scenario.arrivals, n, streams.generator("arrivals")))
    found: dict[Any, list[float]] = {s.id: [] for s in workflow.steps}
    if first_token:
        found.update({(s.id, TTFT_SAMPLE): [] for s in workflow.steps})
    for call in records.calls:
        if call.outcome == OUTCOME_OK:
            found[call.step].append(call.end - call.start)
            if first_token:
                found[(call.step, TTFT_SAMPLE)].append(call.queue + call.ttft)
    for action in records.actions:  # tool steps: submit to confirmation
        if action.state == CONFIRMED:
            found[action.step].append(action.answered - action.submitted)
    return {step: np.asarray(values) for step, values in found.items()}


def resolve_specs(
    scenario: Scenario, seed: int, latencies: dict[Any, np.ndarray] | None = None
) -> dict[str, dict[str, PlainPolicy]]:
    """Per policy and step, the plain spec it runs with every threshold in seconds (and
    `adaptive`'s `reserve_s` filled in from the pilot's medians); a tool step's spec as written
    (no policy runs it: see the module docstring)."""
    if latencies is None and needs_pilot(scenario):
        latencies = step_latencies(scenario, seed, first_token=True)
    reserve = _reserves(scenario, latencies) if latencies is not None else {}
    tools = tool_steps(scenario)
    resolved: dict[str, dict[str, PlainPolicy]] = {}
    for name, per_step in effective_specs(scenario).items():
        resolved[name] = {}
        for step, spec in per_step.items():
            if step in tools:
                resolved[name][step] = spec
                continue
            update: dict[str, Any] = {}
            for field in THRESHOLD_FIELDS.get(type(spec), ()):
                value = getattr(spec, field)
                pct = None if value is None else percentile_of(value)
                if pct is None:
                    continue
                key = step if field != "ttft_cutoff" else (step, TTFT_SAMPLE)
                sample = None if latencies is None else latencies.get(key)
                if sample is None or len(sample) == 0:
                    raise ScenarioError(
                        scenario.source,
                        [
                            (
                                format_path(("policies", name, field)),
                                f"cannot measure {value} of step '{step}': no call of it "
                                f"succeeded in the pilot run of {scenario.pilot.requests} "
                                "requests",
                            )
                        ],
                    )
                update[field] = seconds_of(value, sample)  # pNN, or K x pNN
            if isinstance(spec, AdaptivePolicy) and spec.reserve_s is None:
                update["reserve_s"] = reserve.get(step, 0.0)
            resolved[name][step] = spec.model_copy(update=update) if update else spec
    return resolved


def _reserves(scenario: Scenario, latencies: dict[Any, np.ndarray]) -> dict[str, float]:
    """Per step: the sum of pilot median latencies along the longest path of steps after it."""
    workflow = Workflow.from_scenario(scenario)
    median = {
        s.id: float(np.median(latencies[s.id])) if len(latencies.get(s.id, ())) else 0.0
        for s in workflow.steps
    }
    after: dict[int, float] = {}
    for step in reversed(workflow.steps):  # steps are listed after what they wait for
        after[step.index] = max(
            (median[workflow.steps[i].id] + after.get(i, 0.0) for i in step.unlocks),
            default=0.0,
        )
    return {s.id: after[s.index] for s in workflow.steps}


def resolve_thresholds(
    scenario: Scenario, seed: int, latencies: dict[Any, np.ndarray] | None = None
) -> dict[str, dict[str, float]]:
    """Per policy and step, the main threshold in seconds (`cutoff`, `after` or
    `upgrade_within`; percentiles measured by the pilot). Steps without one are left out."""
    return thresholds_of(resolve_specs(scenario, seed, latencies), tool_steps(scenario))


def thresholds_of(
    resolved: dict[str, dict[str, PlainPolicy]], tools: frozenset[str]
) -> dict[str, dict[str, float]]:
    """The main threshold of each policy and step of resolved specs (see `resolve_specs`),
    leaving out the `tools` steps (`tool_steps`: a threshold of theirs applies to no call)."""
    out: dict[str, dict[str, float]] = {}
    for name, per_step in resolved.items():
        out[name] = {}
        for step, spec in per_step.items():
            fields = THRESHOLD_FIELDS.get(type(spec), ())
            if fields and step not in tools:
                out[name][step] = float(getattr(spec, fields[0]))
    return out
