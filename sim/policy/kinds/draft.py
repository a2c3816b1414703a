"""The kind `draft`: race a cheap fast draft model against the primary, keep the primary's
answer if it comes within `upgrade_within`."""

from __future__ import annotations

import simpy

from sim.model.config import DraftPolicy
from sim.model.rows import OUTCOME_OK, Call
from sim.model.workflow import Step
from sim.policy.kinds.base import DUE, Kind, other_route, seconds
from sim.policy.plans import Attempt, DraftPlan, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes


class Draft(Policy):
    """Race a cheap fast draft model against the primary. The primary's valid answer wins
    whenever it comes first or within `upgrade_within` of the step's start (an upgrade if the
    draft was already in hand); past that, or if the primary fails, the draft is kept."""

    def __init__(self, name: str, plans: dict[str, DraftPlan]) -> None:
        self.name = name
        self.plans = plans

    def execute(self, run: StepRun) -> StepGenerator:
        plan = self.plans[run.step.id]
        env = run.env
        window_ends = env.now + plan.upgrade_within
        primary = run.start(0, plan.primary)
        draft = run.start(1, plan.draft)
        live = {primary, draft}
        held: Call | None = None
        while True:
            events: list[simpy.Event] = [p for p in (primary, draft) if p in live]
            if held is not None:
                events.append(env.timeout(max(0.0, window_ends - env.now)))
            if not events:
                return False
            yield env.any_of(events)
            if run.closed:
                return False
            if primary in live and primary.triggered:
                live.discard(primary)
                call = primary.value
                if call is not None and call.outcome == OUTCOME_OK:
                    if draft in live:
                        run.cancel(draft)
                    if held is not None:
                        run.note_draft(kept=False)
                    run.accept(call)
                    return True
            if draft in live and draft.triggered:
                live.discard(draft)
                call = draft.value
                if call is not None and call.outcome == OUTCOME_OK:
                    held = call
            if held is not None and (primary not in live or env.now >= window_ends - DUE):
                if primary in live:
                    run.cancel(primary)
                run.note_draft(kept=True)
                run.accept(held)
                return True


def _build(
    name: str,
    spec: DraftPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    resolved: dict[str, float],
) -> Draft:
    """A `DraftPlan` per step: the primary on the step's route, the draft on the first provider
    serving `model`, the window `resolved[step]` unless given in seconds."""
    plans = {}
    for step in steps:
        draft_route = other_route(routes, spec.model, spec.providers, step)
        within = seconds(spec.upgrade_within, resolved.get(step.id))
        plans[step.id] = DraftPlan(
            Attempt(step.provider, step.model, None),
            Attempt(draft_route[0], spec.model, None),
            float(within),  # type: ignore[arg-type]
        )
    return Draft(name, plans)


def _two(spec: DraftPolicy) -> int:
    return 2


#: No vectorized twin. A step starts two calls at once (the order policies go to workers); the
#: memory estimate counts one per step, as it always has (a change would move its choices).
DRAFT = Kind("draft", DraftPolicy, _build, calls_at_once=_two)
#: The kinds of this module, for the registry.
KINDS = (DRAFT,)
