"""The kind `hedge`: a primary call; a hedge fires `after` past the last start, or at once on a
failure."""

from __future__ import annotations

import math
from typing import Any

import simpy

from sim.model.config import HedgePolicy
from sim.model.workflow import Step
from sim.policy.kinds.base import NEUTRAL, Kind, route, settle
from sim.policy.plans import Attempt, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes
from sim.policy.vector import VectorRun


class Hedge(Policy):
    """A primary call; a hedge fires `after` past the last start, or at once on a failure."""

    vectorized = True

    def __init__(self, name: str, plans: dict[str, list[Attempt]], after: dict[str, float]) -> None:
        self.name = name
        self.plans = plans
        self.after = after

    def execute(self, run: StepRun) -> StepGenerator:
        plans = self.plans[run.step.id]
        delay = self.after[run.step.id]
        env = run.env
        pending = [run.start(0, plans[0])]
        fired, next_fire = 1, env.now + delay
        while pending:
            events: list[simpy.Event] = list(pending)
            if fired < len(plans) and math.isfinite(next_fire):
                events.append(env.timeout(max(0.0, next_fire - env.now)))
            yield env.any_of(events)
            won, pending = settle(run, pending)
            if won:
                return True
            if run.closed:
                return False
            if fired < len(plans) and (not pending or env.now >= next_fire):
                # a hedge beside a call in flight, or a retry after every call failed
                if run.may_hedge(plans[fired].provider) if pending else run.may_retry():
                    pending.append(run.start(fired, plans[fired]))
                    fired, next_fire = fired + 1, env.now + delay
                elif pending:
                    next_fire = math.inf  # the controls refused: no more timed hedges
                else:
                    return False
        return False

    def run_vector(self, run: VectorRun, step: Step, rows: Any, start: Any, deadline: Any) -> Any:
        return run.on_timer(step, self.plans[step.id], self.after[step.id], rows, start, deadline)

    @classmethod
    def merge(cls, name: str, by_step: dict[str, Policy]) -> Policy | None:
        plans = {s: m.plans[s] for s, m in by_step.items()}  # type: ignore[attr-defined]
        after = {s: m.after[s] for s, m in by_step.items()}  # type: ignore[attr-defined]
        return Hedge(name, plans, after)


def _build(
    name: str, spec: HedgePolicy, routes: Routes, steps: tuple[Step, ...], seconds: dict[str, float]
) -> Hedge:
    """The primary on the step's provider, then `hedges` attempts over `providers` in turn,
    each `seconds[step]` after the last start."""
    plans = {}
    for step in steps:
        providers = route(routes, step.model, spec.providers, step.provider)
        hedges = [
            Attempt(providers[h % len(providers)], step.model, None) for h in range(spec.hedges)
        ]
        plans[step.id] = [Attempt(step.provider, step.model, None), *hedges]
    return Hedge(name, plans, seconds)


HEDGE = Kind(
    "hedge", HedgePolicy, _build,
    vector_fields=dict.fromkeys(("kind", "after", "providers", "hedges"), NEUTRAL),
)  # fmt: skip
#: The kinds of this module, for the registry.
KINDS = (HEDGE,)
