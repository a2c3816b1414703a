"""One deadline through every step: the rules a policy runs under and the arithmetic of budgets.

A request's time is split into budgets kept apart: queue wait (per call), attempt (per call),
step (queue waits and retries together) and the workflow's deadline, of which `reserve_s` is
kept back for validation and delivery. `DeadlineRules` holds one policy's choices (propagate the
deadline or not, admission by expected attempt time); `attempt_limit` says how long an attempt
may run and which budget binds; `admits` is the deadline-aware admission rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sim.model.config import Scenario
from sim.model.errors import ScenarioError, format_path
from sim.model.thresholds import expected_of, percentile_of, seconds_of

# What ended a call early (the `ended_by` column); "" when it ended on its own.
BY_QUEUE = "queue"  # waited past its step's queue_budget_s for a slot
BY_ATTEMPT = "attempt"  # cut at its attempt budget (the policy's cut or attempt_budget_s)
BY_STEP = "step"  # cut when its step's budget_s ran out
BY_DEADLINE = "deadline"  # cut or cancelled by the request's deadline (less reserve_s)
BY_ADMISSION = "admission"  # picked up with too little time left to finish: never served
BY_LOSER = "loser"  # a race or hedge attempt cancelled because another answered
BY_RUN = "run"  # cancelled because its run failed elsewhere (a required step)
BY_DISCONNECT = "disconnect"  # cancelled because the caller hung up
BY_SDK = "sdk"  # cut by the provider client's own per-attempt timeout (sdk.timeout_s)
ENDED_BY = (
    "", BY_QUEUE, BY_ATTEMPT, BY_STEP, BY_DEADLINE, BY_ADMISSION, BY_LOSER, BY_RUN, BY_DISCONNECT,
    BY_SDK,
)  # fmt: skip
#: The budgets the summary's breach_* columns count, in order.
BUDGETS = (BY_QUEUE, BY_ATTEMPT, BY_STEP, BY_DEADLINE)


@dataclass(frozen=True)
class DeadlineRules:
    """How one policy's work sees its request's deadline.

    `propagate`: the deadline reaches every call (cancelled at it; attempts get the time left
    minus `reserve_s`); without it, nothing below the edge knows the deadline and the work runs
    on. `expected[step]`: the expected attempt time admission uses (None: admission off).
    """

    propagate: bool = True
    reserve_s: float = 0.0
    expected: dict[str, float] | None = field(default=None)

    @property
    def admission(self) -> bool:
        """True when attempts are admitted by the time left."""
        return self.expected is not None

    @property
    def caps_attempts(self) -> bool:
        """True when attempts are cut at the deadline less the reserve (rather than being
        cancelled by the deadline itself, which is the same instant when the reserve is 0)."""
        return self.propagate and (self.reserve_s > 0 or self.expected is not None)


def rules_for(
    scenario: Scenario, policy: str, expected: dict[str, float] | None = None
) -> DeadlineRules:
    """The rules of scenario policy `policy` (defaults for any other name, e.g. the pilot's);
    `expected` are its admission times resolved per step (see `resolve_expected`)."""
    spec = scenario.policies.get(policy)
    propagate = getattr(spec, "propagate_deadline", True)
    admission = getattr(spec, "admission", None)
    if admission is not None and expected is None:
        values = {s.id: expected_of(admission.expected, s.id) for s in scenario.workflow.steps}
        for seconds in values.values():
            if percentile_of(seconds) is not None:
                raise ScenarioError(
                    scenario.source,
                    [
                        (
                            format_path(("policies", policy, "admission", "expected")),
                            f"{seconds} needs the pilot run: resolve it with resolve_expected",
                        )
                    ],
                )
        expected = {step: float(seconds) for step, seconds in values.items()}
    if admission is None:
        expected = None
    return DeadlineRules(propagate, scenario.workflow.reserve_s, expected)


def without_budgets(scenario: Scenario) -> Scenario:
    """The scenario with no step budgets and no reserve: what the pilot run measures, so a
    budget does not censor the latencies it is compared with."""
    steps = [
        s.model_copy(update={"budget_s": None, "queue_budget_s": None, "attempt_budget_s": None})
        for s in scenario.workflow.steps
    ]
    workflow = scenario.workflow.model_copy(update={"steps": steps, "reserve_s": 0.0})
    return scenario.model_copy(update={"workflow": workflow})


def admission_needs_pilot(scenario: Scenario) -> bool:
    """True if any policy admits attempts by a 'pNN' of the steps' pilot latencies."""
    return any(
        percentile_of(expected_of(spec.admission.expected, step.id)) is not None
        for spec in scenario.policies.values()
        if getattr(spec, "admission", None) is not None
        for step in scenario.workflow.steps
    )


def resolve_expected(
    scenario: Scenario, latencies: dict[str, np.ndarray] | None
) -> dict[str, dict[str, float] | None]:
    """Per policy, the expected attempt time of each step its admission uses (None: off)."""
    resolved: dict[str, dict[str, float] | None] = {}
    for name, spec in scenario.policies.items():
        admission = getattr(spec, "admission", None)
        if admission is None:
            resolved[name] = None
            continue
        per_step: dict[str, float] = {}
        for step in scenario.workflow.steps:  # tool steps too: admission gates their submits
            value = expected_of(admission.expected, step.id)
            if percentile_of(value) is None:
                per_step[step.id] = float(value)
                continue
            sample = None if latencies is None else latencies.get(step.id)
            if sample is None or len(sample) == 0:
                where = ("policies", name, "admission", "expected")
                if isinstance(admission.expected, dict) and step.id in admission.expected:
                    where = (*where, step.id)
                raise ScenarioError(
                    scenario.source,
                    [
                        (
                            format_path(where),
                            f"cannot measure {value} of step '{step.id}': nothing "
                            f"of it succeeded in the pilot run of {scenario.pilot.requests} "
                            "requests",
                        )
                    ],
                )
            per_step[step.id] = seconds_of(value, sample)
        resolved[name] = per_step
    return resolved


def attempt_limit(
    now: float,
    own: float | None,
    attempt_budget: float | None,
    step_end: float,
    work_end: float,
) -> tuple[float | None, str]:
    """(seconds an attempt starting `now` may run, the budget that binds): the least of its
    own cut `own` (the policy's), the step's `attempt_budget`, what is left of the step's
    budget (until `step_end`) and of the request's time (until `work_end`: the deadline less the
    reserve, inf when the attempt is not capped by it). None: no limit."""
    limit, by = own, BY_ATTEMPT
    if attempt_budget is not None and (limit is None or attempt_budget < limit):
        limit = attempt_budget
    if step_end < math.inf and (limit is None or step_end - now < limit):
        limit, by = step_end - now, BY_STEP
    if work_end < math.inf and (limit is None or work_end - now <= limit):
        limit, by = work_end - now, BY_DEADLINE
    return limit, by


def admits(time_left: float, wait: float, expected: float) -> bool:
    """The admission rule: an attempt after `wait` seconds, expected to take `expected`, starts
    only if the time left (already less the reserve) exceeds both."""
    return time_left > wait + expected
