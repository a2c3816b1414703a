"""Thresholds from the pilot: 'pNN' becomes seconds per step, in the plan.

As the article prescribes, cutoffs are not guessed: the workflow is first run under a plain wait
policy (no timeouts, no retries, no deadline, no step budgets; `pilot_plan`) on its own random
streams, and 'p95' becomes that step's 95th percentile of successful call latency (for
`ttft_cutoff`, of its first-token latency). The pilot also gives `adaptive` its default
`reserve_s` (the sum of median latencies along the longest path of steps after a step) and
deadline-aware admission its expected attempt time per step. Running the pilot is the study
layer's (`sim.study.pilot`); here its samples are turned into each policy's resolved specs.

A tool step makes no LLM call: a policy's thresholds apply to no call of it and are not
resolved for it (its spec is kept as written). Admission's expected time does apply to tool
submits, so it is measured for every step.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from sim.model.config import FIRST_TOKEN_FIELDS, THRESHOLD_FIELDS, PlainPolicy, pilot_fields
from sim.model.errors import ScenarioError, format_path
from sim.model.thresholds import expected_of, percentile_of, seconds_of
from sim.model.workflow import Workflow
from sim.plan.plan import FIRST_TOKEN, Measured, Plan, PolicyPlan
from sim.policy.deadlines import DeadlineRules
from sim.policy.kinds import kind_of
from sim.policy.kinds.sequential import plain_wait

#: The pilot's policy name.
PILOT = "pilot"


def needs_pilot(plan: Plan) -> bool:
    """True if any policy (at any LLM step) names a percentile threshold, runs `adaptive`
    without its own `reserve_s`, or admits attempts by a percentile of the pilot latencies."""
    tools = plan.tool_steps
    for policy in plan.policies.values():
        if _admission_needs_pilot(plan, policy):
            return True
        for step, spec in policy.written.items():
            if step in tools:
                continue
            if kind_of(spec).reserve_from_pilot(spec):
                return True
            for name in pilot_fields(spec):
                value = getattr(spec, name)
                if value is not None and percentile_of(value) is not None:
                    return True
    return False


def _admission_needs_pilot(plan: Plan, policy: PolicyPlan) -> bool:
    admission = _admission(plan, policy.name)
    if admission is None:
        return False
    return any(
        percentile_of(expected_of(admission.expected, s.id)) is not None
        for s in plan.workflow.steps
    )


def _admission(plan: Plan, name: str) -> Any:
    """The policy's `admission` (whole-policy key), or None."""
    return getattr(plan.scenario.policies.get(name), "admission", None)


def pilot_plan(plan: Plan) -> Plan:
    """What the pilot runs: the workflow with no step budgets and no reserve (so a budget does
    not censor the latencies it is compared with), one plain `wait` policy, no deadline."""
    steps = tuple(
        replace(s, budget_s=math.inf, queue_budget_s=None, attempt_budget_s=None)
        for s in plan.workflow.steps
    )
    wait = plain_wait()
    written = {s.id: wait for s in steps}
    pilot = PolicyPlan(
        PILOT, wait.kind, written, written, DeadlineRules(True, 0.0, None), {}, None, (),
        resolved=True,
    )  # fmt: skip
    return replace(
        plan, workflow=Workflow(steps), reserve_s=0.0, deadline_s=math.inf,
        policies={PILOT: pilot},
    )  # fmt: skip


def resolve_policies(plan: Plan, measured: Measured | None) -> dict[str, PolicyPlan]:
    """Every policy of `plan` with its specs in seconds, thresholds and admission times from
    the pilot's samples (see the module docstring)."""
    reserve = reserves(plan, measured) if measured is not None else {}
    return {
        name: _resolved(plan, policy, measured, reserve) for name, policy in plan.policies.items()
    }


def _resolved(
    plan: Plan, policy: PolicyPlan, measured: Measured | None, reserve: dict[str, float]
) -> PolicyPlan:
    tools = plan.tool_steps
    specs: dict[str, PlainPolicy] = {}
    for step, spec in policy.written.items():
        if step in tools:
            specs[step] = spec
            continue
        update: dict[str, Any] = {}
        for field in pilot_fields(spec):
            value = getattr(spec, field)
            pct = None if value is None else percentile_of(value)
            if pct is None:
                continue
            key = (step, FIRST_TOKEN) if field in FIRST_TOKEN_FIELDS else step
            sample = None if measured is None else measured.get(key)
            if sample is None or len(sample) == 0:
                raise ScenarioError(
                    plan.source,
                    [
                        (
                            format_path(("policies", policy.name, field)),
                            f"cannot measure {value} of step '{step}': no call of it "
                            f"succeeded in the pilot run of {plan.pilot_requests} requests",
                        )
                    ],
                )
            update[field] = seconds_of(value, sample)  # pNN, or K x pNN
        if kind_of(spec).reserve_from_pilot(spec):
            update["reserve_s"] = reserve.get(step, 0.0)
        specs[step] = spec.model_copy(update=update) if update else spec
    expected = _expected(plan, policy.name, measured)
    rules = DeadlineRules(policy.rules.propagate, policy.rules.reserve_s, expected)
    return replace(
        policy, specs=specs, thresholds=thresholds_of(specs, tools), rules=rules,
        expected=expected, resolved=True,
    )  # fmt: skip


def reserves(plan: Plan, measured: Measured) -> dict[str, float]:
    """Per step: the sum of pilot median latencies along the longest path of steps after it."""
    steps = plan.workflow.steps
    median = {
        s.id: float(np.median(measured[s.id])) if len(measured.get(s.id, ())) else 0.0
        for s in steps
    }
    after: dict[int, float] = {}
    for step in reversed(steps):  # steps are listed after what they wait for
        after[step.index] = max(
            (median[steps[i].id] + after.get(i, 0.0) for i in step.unlocks), default=0.0
        )
    return {s.id: after[s.index] for s in steps}


def thresholds_of(specs: dict[str, PlainPolicy], tools: frozenset[str]) -> dict[str, float]:
    """The main threshold of each step of resolved specs, leaving out the `tools` steps (a
    threshold of theirs applies to no call)."""
    out: dict[str, float] = {}
    for step, spec in specs.items():
        fields = THRESHOLD_FIELDS.get(type(spec), ())
        if fields and step not in tools:
            out[step] = float(getattr(spec, fields[0]))
    return out


def _expected(plan: Plan, name: str, measured: Measured | None) -> dict[str, float] | None:
    """The expected attempt time of each step the policy's admission uses (None: off)."""
    admission = _admission(plan, name)
    if admission is None:
        return None
    per_step: dict[str, float] = {}
    for step in plan.workflow.steps:  # tool steps too: admission gates their submits
        value = expected_of(admission.expected, step.id)
        if percentile_of(value) is None:
            per_step[step.id] = float(value)
            continue
        sample = None if measured is None else measured.get(step.id)
        if sample is None or len(sample) == 0:
            where: tuple[str | int, ...] = ("policies", name, "admission", "expected")
            if isinstance(admission.expected, dict) and step.id in admission.expected:
                where = (*where, step.id)
            raise ScenarioError(
                plan.source,
                [
                    (
                        format_path(where),
                        f"cannot measure {value} of step '{step.id}': nothing of it succeeded "
                        f"in the pilot run of {plan.pilot_requests} requests",
                    )
                ],
            )
        per_step[step.id] = seconds_of(value, sample)
    return per_step


def resolve(plan: Plan, measured: Measured | None) -> Plan:
    """`plan` with every policy's thresholds in seconds from the pilot's samples `measured`
    (None: nothing needs measuring; a percentile left is a `ScenarioError`)."""
    measured_on = plan.seed if measured is not None else None
    return replace(plan, policies=resolve_policies(plan, measured), measured_on=measured_on)
