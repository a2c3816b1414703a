"""The pilot run: measure each step's latency first, so 'pNN' thresholds become seconds.

The plan's pilot (`sim.plan.pilot_plan`: the workflow with no budgets, a plain wait policy, no
deadline) runs on the event engine on its own random streams (`Streams(seed, "pilot")`, never
shared with the main run); every step's successful call latencies (queue wait included) and
their first-token latencies are its samples, and `sim.plan.resolve` turns them into each
policy's seconds. A tool step's samples are its confirmed actions' time from submit to
confirmation (admission's expected time applies to tool submits).
"""

from __future__ import annotations

import numpy as np

from sim.engine.simulation import Simulation
from sim.model.arrivals import arrival_times
from sim.model.rows import CONFIRMED, OUTCOME_OK
from sim.model.streams import CallDrawBank, Streams
from sim.plan import FIRST_TOKEN, PILOT, Measured, Plan, needs_pilot, pilot_plan, resolve


def measure(plan: Plan, seed: int | None = None) -> Measured:
    """The pilot's samples for `plan` on `seed` (default: the plan's): per step its successful
    latencies (s), per (step, FIRST_TOKEN) their first-token latencies."""
    streams = Streams(plan.seed if seed is None else seed, "pilot")
    n = plan.pilot_requests
    pilot = pilot_plan(plan)
    sim = Simulation(pilot, pilot.runtime(PILOT), CallDrawBank(streams.child("calls"), n), streams)
    records = sim.run(arrival_times(plan.arrivals, n, streams.generator("arrivals")))
    steps = plan.workflow.steps
    found: dict[object, list[float]] = {s.id: [] for s in steps}
    found.update({(s.id, FIRST_TOKEN): [] for s in steps})
    for call in records.calls:
        if call.outcome == OUTCOME_OK:
            found[call.step].append(call.end - call.start)
            found[(call.step, FIRST_TOKEN)].append(call.queue + call.ttft)
    for action in records.actions:  # tool steps: submit to confirmation
        if action.state == CONFIRMED:
            found[action.step].append(action.answered - action.submitted)
    return {step: np.asarray(values) for step, values in found.items()}


def prepare(plan: Plan) -> tuple[Plan, Measured | None]:
    """`plan` resolved for its seed, after a pilot run where it needs one (not again where it
    was measured on this seed); and the pilot's samples (None: none run)."""
    if not needs_pilot(plan):
        return plan, None
    if plan.measured_on == plan.seed:
        return plan, None
    measured = measure(plan)
    return resolve(plan, measured), measured
