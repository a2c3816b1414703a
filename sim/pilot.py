"""The pilot run: measure each step's latency first, then turn 'pNN' thresholds into seconds.

As the article prescribes, cutoffs are not guessed: the workflow is run under a plain wait policy
(no timeouts, no retries, no deadline, no step budgets) on its own random streams, every
step's successful call latencies (queue wait included) are recorded, and 'p95' becomes that
step's 95th percentile.
"""

from __future__ import annotations

import numpy as np

from sim.actions import CONFIRMED
from sim.arrivals import arrival_times
from sim.config import (
    CutPolicy,
    DownshiftPolicy,
    HedgePolicy,
    Scenario,
    WaitPolicy,
    percentile_of,
)
from sim.deadlines import without_budgets
from sim.engine import Simulation, serving_latencies
from sim.errors import ScenarioError, format_path
from sim.policies import build_policy
from sim.provider import OUTCOME_OK
from sim.streams import CallDrawBank, Streams
from sim.workflow import Workflow

#: Policy fields that take a threshold, by policy class.
THRESHOLD_FIELD = {CutPolicy: "cutoff", HedgePolicy: "after", DownshiftPolicy: "cutoff"}


def needs_pilot(scenario: Scenario) -> bool:
    """True if any policy names a percentile threshold."""
    return any(
        percentile_of(getattr(spec, THRESHOLD_FIELD[type(spec)])) is not None
        for spec in scenario.policies.values()
        if type(spec) in THRESHOLD_FIELD
    )


def step_latencies(scenario: Scenario, seed: int) -> dict[str, np.ndarray]:
    """Successful call latencies (seconds, queue included) per step in a pilot run; for a tool
    step, confirmed actions' time from submit to confirmation."""
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
    found: dict[str, list[float]] = {s.id: [] for s in workflow.steps}
    for call in records.calls:
        if call.outcome == OUTCOME_OK:
            found[call.step].append(call.end - call.start)
    for action in records.actions:  # tool steps: submit to confirmation
        if action.state == CONFIRMED:
            found[action.step].append(action.answered - action.submitted)
    return {step: np.asarray(values) for step, values in found.items()}


def resolve_thresholds(
    scenario: Scenario, seed: int, latencies: dict[str, np.ndarray] | None = None
) -> dict[str, dict[str, float]]:
    """Per policy and step, the threshold in seconds (percentiles measured by the pilot)."""
    if latencies is None and needs_pilot(scenario):
        latencies = step_latencies(scenario, seed)
    resolved: dict[str, dict[str, float]] = {}
    for name, spec in scenario.policies.items():
        field = THRESHOLD_FIELD.get(type(spec))
        if field is None:
            resolved[name] = {}
            continue
        value = getattr(spec, field)
        pct = percentile_of(value)
        per_step: dict[str, float] = {}
        for step in scenario.workflow.steps:
            if pct is None:
                per_step[step.id] = float(value)
                continue
            assert latencies is not None
            sample = latencies[step.id]
            if len(sample) == 0:
                raise ScenarioError(
                    scenario.name,
                    [
                        (
                            format_path(("policies", name, field)),
                            f"cannot measure {value} of step '{step.id}': no call of it "
                            f"succeeded in the pilot run of {scenario.pilot.requests} requests",
                        )
                    ],
                )
            per_step[step.id] = float(np.percentile(sample, pct))
        resolved[name] = per_step
    return resolved
