"""How one step is executed under each policy: wait, cut, race, hedge, downshift.

Each policy is a small object whose `execute` is a simpy generator driving one step through a
`StepRun` (the engine's handle: call inline, start a parallel call, cancel one, time left). The
route of every attempt (which provider, which model, cut after how long) is a pure decision made
up front in `Attempt` plans, so the simpy part stays short.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from sim.config import (
    CutPolicy,
    DownshiftPolicy,
    HedgePolicy,
    RacePolicy,
    Scenario,
    WaitPolicy,
)
from sim.provider import OUTCOME_OK, OUTCOME_RATE_LIMITED, Call
from sim.workflow import Step

StepGenerator = Generator[simpy.Event, Any, bool]


@dataclass(frozen=True, slots=True)
class Attempt:
    """Where and how long one attempt runs: provider, model, cut after `give_up_after` seconds."""

    provider: str
    model: str
    give_up_after: float | None


class StepRun(Protocol):
    """What a policy may do while running one step (implemented by the engine)."""

    env: simpy.Environment
    step: Step

    @property
    def closed(self) -> bool:
        """True once the request is over (deadline passed or failed): start nothing new."""
        ...

    @property
    def time_left(self) -> float:
        """Seconds until the request's deadline."""
        ...

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        """Run one attempt inline and return its call (None if the request closed first)."""
        ...

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        """Start one attempt in parallel; the process's value is its call (or None)."""
        ...

    def cancel(self, process: simpy.Process) -> None:
        """Cancel a parallel attempt still in flight (really interrupts it)."""
        ...


class Policy:
    """A way to execute a step: wait, cut, race, hedge or downshift, with its attempts planned."""

    name: str

    def execute(self, run: StepRun) -> StepGenerator:
        """Drive one step to success (True) or failure (False)."""
        raise NotImplementedError


def _route(scenario: Scenario, model: str, providers: list[str] | None, default: str) -> list[str]:
    """Providers an attempt on `model` may use, in turn (those of `providers` serving it)."""
    if not providers:
        return [default]
    serving = [p for p in providers if model in scenario.providers[p].serves]
    return serving or [default]


class Sequential(Policy):
    """wait and cut: one attempt at a time, each cut at its give-up time, then the next."""

    def __init__(self, name: str, plans: dict[str, list[Attempt]]) -> None:
        self.name = name
        self.plans = plans

    def execute(self, run: StepRun) -> StepGenerator:
        plans = self.plans[run.step.id]
        for attempt, plan in enumerate(plans):
            call = yield from run.call(attempt, plan)
            if call is None or run.closed:
                return False
            if call.outcome == OUTCOME_OK:
                return True
            if call.outcome == OUTCOME_RATE_LIMITED and attempt + 1 < len(plans):
                # honour Retry-After, but only if the deadline leaves time to use the retry
                if call.retry_after >= run.time_left:
                    return False
                if call.retry_after > 0:
                    yield run.env.timeout(call.retry_after)
        return False


def _settle(run: StepRun, pending: list[simpy.Process]) -> tuple[bool, list[simpy.Process]]:
    """After a wake-up: (True, []) if an attempt answered validly (losers cancelled), else the
    attempts still in flight."""
    still = [p for p in pending if not p.triggered]
    won = any(p.value is not None and p.value.outcome == OUTCOME_OK for p in pending if p.triggered)
    if won:
        for process in still:
            run.cancel(process)
        return True, []
    return False, still


class Race(Policy):
    """`attempts` calls at once; the first valid answer wins and the rest are cancelled."""

    def __init__(self, name: str, rounds: dict[str, list[list[Attempt]]]) -> None:
        self.name = name
        self.rounds = rounds

    def execute(self, run: StepRun) -> StepGenerator:
        attempt = 0
        for plans in self.rounds[run.step.id]:
            if run.closed:
                return False
            pending = []
            for plan in plans:
                pending.append(run.start(attempt, plan))
                attempt += 1
            while pending:
                yield run.env.any_of(pending)
                won, pending = _settle(run, pending)
                if won:
                    return True
        return False


class Hedge(Policy):
    """A primary call; a hedge fires `after` past the last start, or at once on a failure."""

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
            if fired < len(plans):
                events.append(env.timeout(max(0.0, next_fire - env.now)))
            yield env.any_of(events)
            won, pending = _settle(run, pending)
            if won:
                return True
            if run.closed:
                return False
            if fired < len(plans) and (not pending or env.now >= next_fire):
                pending.append(run.start(fired, plans[fired]))
                fired, next_fire = fired + 1, env.now + delay
        return False


def build_policy(
    name: str,
    spec: WaitPolicy | CutPolicy | RacePolicy | HedgePolicy | DownshiftPolicy,
    scenario: Scenario,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Policy:
    """The runtime policy of a spec; `seconds[step]` is its threshold resolved for that step."""
    if isinstance(spec, WaitPolicy | CutPolicy):
        give_up = spec.timeout_s if isinstance(spec, WaitPolicy) else None
        plans = {}
        for step in steps:
            route = _route(scenario, step.model, spec.providers, step.provider)
            limit = give_up if isinstance(spec, WaitPolicy) else seconds[step.id]
            plans[step.id] = [
                Attempt(route[k % len(route)], step.model, limit) for k in range(spec.retries + 1)
            ]
        return Sequential(name, plans)
    if isinstance(spec, RacePolicy):
        rounds = {}
        for step in steps:
            route = _route(scenario, step.model, spec.providers, step.provider)
            one = [
                Attempt(route[j % len(route)], step.model, spec.timeout_s)
                for j in range(spec.attempts)
            ]
            rounds[step.id] = [one] * (spec.retries + 1)
        return Race(name, rounds)
    if isinstance(spec, HedgePolicy):
        plans = {}
        for step in steps:
            route = _route(scenario, step.model, spec.providers, step.provider)
            hedges = [Attempt(route[h % len(route)], step.model, None) for h in range(spec.hedges)]
            plans[step.id] = [Attempt(step.provider, step.model, None), *hedges]
        return Hedge(name, plans, seconds)
    plans = {}
    for step in steps:
        down_default = (
            step.provider
            if spec.to in scenario.providers[step.provider].serves
            else scenario.serving_providers(spec.to)[0]
        )
        route = _route(scenario, spec.to, spec.providers, down_default)
        first = Attempt(step.provider, step.model, seconds[step.id])
        rest = [Attempt(route[k % len(route)], spec.to, None) for k in range(spec.retries)]
        plans[step.id] = [first, *rest]
    return Sequential(name, plans)
