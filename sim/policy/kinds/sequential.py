"""The kinds `wait`, `cut` and `downshift`: one attempt at a time, each cut at its give-up time.

One module for the three because they are one runtime class (`Sequential`), one event-engine
run and one vectorized twin; they differ only in the plan built from the spec: `wait` gives up
after `timeout_s` (or never), `cut` at the step's cutoff, `downshift` cuts the first attempt at
its cutoff and retries on the model `to`.
"""

from __future__ import annotations

from typing import Any

from sim.model.config import BackoffSpec, CutPolicy, DownshiftPolicy, WaitPolicy
from sim.model.rows import OUTCOME_OK, OUTCOME_RATE_LIMITED
from sim.model.workflow import Step
from sim.policy.kinds.base import (
    NEUTRAL,
    STREAM_CUT_FIELDS,
    Kind,
    retry_pause,
    route,
    shared_backoff,
    stream_cuts,
)
from sim.policy.plans import Attempt, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes
from sim.policy.vector import VectorRun


class Sequential(Policy):
    """wait, cut and downshift: one attempt at a time, each cut at its give-up time, then the
    next."""

    vectorized = True

    def __init__(
        self, name: str, plans: dict[str, list[Attempt]], backoff: BackoffSpec | None = None
    ) -> None:
        self.name = name
        self.plans = plans
        self.backoff = backoff

    def execute(self, run: StepRun) -> StepGenerator:
        plans = self.plans[run.step.id]
        for attempt, plan in enumerate(plans):
            call = yield from run.call(attempt, plan)
            if call is None or run.closed:
                return False
            if call.outcome == OUTCOME_OK:
                return True
            if attempt + 1 < len(plans) and not run.may_retry():
                return False
            if attempt + 1 < len(plans) and (
                self.backoff is not None or call.outcome == OUTCOME_RATE_LIMITED
            ):
                # honour Retry-After / back off, but only if the deadline leaves time to retry
                wait = retry_pause(run, self.backoff, attempt + 1, [call])
                if wait is None:
                    return False
                if wait > 0:
                    yield run.env.timeout(wait)
        return False

    def run_vector(self, run: VectorRun, step: Step, rows: Any, start: Any, deadline: Any) -> Any:
        return run.in_turn(step, self.plans[step.id], rows, start, deadline)

    @classmethod
    def merge(cls, name: str, by_step: dict[str, Policy]) -> Policy | None:
        same, backoff = shared_backoff(by_step)
        if not same:
            return None
        return Sequential(name, {s: m.plans[s] for s, m in by_step.items()}, backoff)  # type: ignore[attr-defined]


def plain_wait() -> WaitPolicy:
    """A `wait` spec with every default (the pilot's policy)."""
    return WaitPolicy(kind="wait")


def _build_wait_or_cut(
    name: str,
    spec: WaitPolicy | CutPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Sequential:
    """`wait`: every attempt given up after `timeout_s` (None: never); `cut`: after the step's
    cutoff in seconds; `retries` more attempts over `providers` in turn."""
    give_up = spec.timeout_s if isinstance(spec, WaitPolicy) else None
    plans = {}
    for step in steps:
        providers = route(routes, step.model, spec.providers, step.provider)
        limit = give_up if isinstance(spec, WaitPolicy) else seconds[step.id]
        plans[step.id] = [
            Attempt(providers[k % len(providers)], step.model, limit, *stream_cuts(spec))
            for k in range(spec.retries + 1)
        ]
    return Sequential(name, plans, spec.backoff)


def _build_downshift(
    name: str,
    spec: DownshiftPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Sequential:
    """The step's model cut at its cutoff, then `retries` attempts on the model `to`."""
    plans = {}
    for step in steps:
        down_default = (
            step.provider
            if routes.serves_model(step.provider, spec.to)
            else routes.serving(spec.to)[0]
        )
        providers = route(routes, spec.to, spec.providers, down_default)
        cuts = stream_cuts(spec)
        first = Attempt(step.provider, step.model, seconds[step.id], *cuts)
        rest = [
            Attempt(providers[k % len(providers)], spec.to, None, *cuts)
            for k in range(spec.retries)
        ]
        plans[step.id] = [first, *rest]
    return Sequential(name, plans, spec.backoff)


WAIT = Kind(
    "wait", WaitPolicy, _build_wait_or_cut,
    vector_fields={**dict.fromkeys(("kind", "timeout_s", "retries", "providers"), NEUTRAL),
                   "backoff": "policy.backoff", **STREAM_CUT_FIELDS},
)  # fmt: skip
CUT = Kind(
    "cut", CutPolicy, _build_wait_or_cut,
    vector_fields={**dict.fromkeys(("kind", "cutoff", "retries", "providers"), NEUTRAL),
                   "backoff": "policy.backoff", **STREAM_CUT_FIELDS},
)  # fmt: skip
DOWNSHIFT = Kind(
    "downshift", DownshiftPolicy, _build_downshift,
    vector_fields={**dict.fromkeys(("kind", "cutoff", "to", "retries", "providers"), NEUTRAL),
                   "backoff": "policy.backoff", **STREAM_CUT_FIELDS},
)  # fmt: skip
#: The kinds of this module, for the registry.
KINDS = (WAIT, CUT, DOWNSHIFT)
