"""The kind `adaptive`: diagnose, then pick the direction (hedge, re-draw, fall down or up).

Its plan per step is an `AdaptivePlan`: the routes per model, the checks (first token, hedge,
cutoff) in seconds, the directions and the reserve the pilot may measure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import simpy

from sim.model.config import AdaptivePolicy
from sim.model.rows import OUTCOME_INVALID, OUTCOME_OK, OUTCOME_RATE_LIMITED, OUTCOME_TRUNCATED
from sim.model.workflow import Step
from sim.policy.kinds.base import DUE, Kind, other_route, seconds
from sim.policy.plans import AdaptivePlan, Attempt, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes


@dataclass(slots=True)
class _Live:
    """An attempt in flight under `adaptive`, with its pending checks (absolute times)."""

    attempt: int
    model: str
    ttft_check: float | None
    hedge_check: float | None
    cutoff_check: float | None

    def next_check(self) -> float:
        pending = [t for t in (self.ttft_check, self.hedge_check, self.cutoff_check) if t]
        return min(pending, default=float("inf"))


class Adaptive(Policy):
    """Diagnose, then pick the direction (the article's "Match the Fix to the Failure").

    - no first token by `ttft_cutoff`: stuck -> hedge a fresh attempt of the same model;
    - no answer by `hedge_after`: hedge a fresh attempt of the same model;
    - at `cutoff` (then every quarter cutoff): no first token -> cut and re-draw; tokens flowing
      too slowly to finish before the deadline minus `reserve` -> cut and fall down;
    - an invalid answer -> fall up; a truncated one -> fall down; an error, timeout or 429 ->
      the same model again on the next provider.
    """

    watches_flights = True

    def __init__(self, name: str, plans: dict[str, AdaptivePlan]) -> None:
        self.name = name
        self.plans = plans

    def execute(self, run: StepRun) -> StepGenerator:
        plan = self.plans[run.step.id]
        env = run.env
        live: dict[simpy.Process, _Live] = {}
        used = 0
        per_model: dict[str, int] = {}

        def launch(model: str) -> None:
            nonlocal used
            if used >= plan.attempts or run.closed:
                return
            route = plan.routes[model]
            k = per_model.get(model, 0)
            per_model[model] = k + 1
            now = env.now
            live[run.start(used, Attempt(route[k % len(route)], model, None))] = _Live(
                used,
                model,
                None if plan.ttft_cutoff is None else now + plan.ttft_cutoff,
                None if plan.hedge_after is None else now + plan.hedge_after,
                now + plan.cutoff,
            )
            used += 1

        launch(plan.model)
        while live:
            due = min(info.next_check() for info in live.values())
            events: list[simpy.Event] = list(live)
            if due < float("inf"):
                events.append(env.timeout(max(0.0, due - env.now)))
            yield env.any_of(events)
            if run.closed:
                return False
            for process in [p for p in live if p.triggered]:
                info = live.pop(process)
                call = process.value
                if call is None:
                    continue
                if call.outcome == OUTCOME_OK:
                    for other in live:
                        run.cancel(other)
                    run.accept(call)
                    return True
                if live:  # another attempt is still on it
                    continue
                if call.outcome == OUTCOME_RATE_LIMITED:
                    if call.retry_after >= run.time_left:
                        continue
                    if call.retry_after > 0:
                        yield env.timeout(call.retry_after)
                        if run.closed:
                            return False
                launch(self._direction(run, plan, call.outcome, info.model, used))
            self._checks(run, plan, live, launch, lambda: used)
        return False

    @staticmethod
    def _direction(run: StepRun, plan: AdaptivePlan, outcome: str, model: str, used: int) -> str:
        """The model of the next attempt after a failed one: up if the answer was wrong, down
        if it was too long, down if a re-draw no longer fits the time left or is the last
        attempt ("almost out: cut fast and fall back"), else the same model re-drawn."""
        if outcome == OUTCOME_INVALID and plan.fall_up is not None:
            return plan.fall_up
        down = plan.fall_down
        if down is None:
            return model
        if outcome == OUTCOME_TRUNCATED or used + 1 >= plan.attempts:
            return down
        return down if run.time_left - plan.reserve < plan.cutoff else model

    @classmethod
    def _checks(
        cls,
        run: StepRun,
        plan: AdaptivePlan,
        live: dict[simpy.Process, _Live],
        launch: Any,
        used: Any,
    ) -> None:
        """Run every check that is due: stuck, hedge, and the diagnosis at the cutoff."""
        now = run.env.now
        for process, info in list(live.items()):
            if process not in live:
                continue
            if info.ttft_check is not None and now >= info.ttft_check - DUE:
                info.ttft_check = None
                if not run.first_token(info.attempt):
                    launch(info.model)  # stuck, not slow: a fresh attempt is newly scheduled
            if info.hedge_check is not None and now >= info.hedge_check - DUE:
                info.hedge_check = None
                launch(info.model)
            if info.cutoff_check is not None and now >= info.cutoff_check - DUE:
                info.cutoff_check = None
                if not run.first_token(info.attempt):  # stuck past the cutoff: cut it
                    run.cancel(process)
                    del live[process]
                    launch(cls._direction(run, plan, "timeout", info.model, used()))
                elif run.projected_left(info.attempt) > run.time_left - plan.reserve:
                    if plan.fall_down is not None and plan.fall_down != info.model:
                        run.cancel(process)
                        del live[process]
                        launch(plan.fall_down)
                else:  # flowing fast enough: look again a quarter cutoff later
                    info.cutoff_check = now + max(1.0, plan.cutoff / 4)


def _build(
    name: str,
    spec: AdaptivePolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    resolved: dict[str, float],
) -> Adaptive:
    """An `AdaptivePlan` per step (its cutoff `resolved[step]` unless given in seconds; its
    other thresholds must already be in seconds)."""
    plans = {}
    for step in steps:
        models = {step.model, spec.fall_down, spec.fall_up} - {None}
        by_model = {
            m: other_route(routes, m, spec.providers, step) for m in models if m is not None
        }
        plans[step.id] = AdaptivePlan(
            model=step.model,
            routes=by_model,
            cutoff=float(seconds(spec.cutoff, resolved.get(step.id))),  # type: ignore[arg-type]
            ttft_cutoff=seconds(spec.ttft_cutoff, None),
            hedge_after=seconds(spec.hedge_after, None),
            fall_down=spec.fall_down,
            fall_up=spec.fall_up,
            attempts=spec.attempts,
            reserve=spec.reserve_s or 0.0,
        )
    return Adaptive(name, plans)


def _reserve_from_pilot(spec: AdaptivePolicy) -> bool:
    return spec.reserve_s is None


#: No vectorized twin: its checks follow each attempt's streaming progress.
ADAPTIVE = Kind("adaptive", AdaptivePolicy, _build, reserve_from_pilot=_reserve_from_pilot)
#: The kinds of this module, for the registry.
KINDS = (ADAPTIVE,)
