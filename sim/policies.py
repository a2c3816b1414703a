"""How one step is executed under each policy: wait, cut, race, hedge, downshift.

Each policy is a small object whose `execute` is a simpy generator driving one step through a
`StepRun` (the engine's handle: call inline, start a parallel call, cancel one, time left). The
route of every attempt (which provider, which model, cut after how long) is a pure decision made
up front in `Attempt` plans, so the simpy part stays short.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from sim.backoff import retry_wait
from sim.config import (
    BackoffSpec,
    ControlsSpec,
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

    def jitter(self, retry: int) -> float:
        """The backoff-jitter uniform of this step's retry number `retry` (common to policies)."""
        ...

    def may_retry(self) -> bool:
        """May a retry (an attempt after a failure) be sent now? (the retry budget)"""
        ...

    def may_hedge(self, provider: str) -> bool:
        """May an extra parallel attempt go to `provider` now? (hedge cap, 429 pause, budget)"""
        ...


class Policy:
    """A way to execute a step: wait, cut, race, hedge or downshift, with its attempts planned."""

    name: str
    #: Load-aware controls of this policy (sim.controls), None when off.
    controls: ControlsSpec | None = None

    def execute(self, run: StepRun) -> StepGenerator:
        """Drive one step to success (True) or failure (False)."""
        raise NotImplementedError


def _route(scenario: Scenario, model: str, providers: list[str] | None, default: str) -> list[str]:
    """Providers an attempt on `model` may use, in turn (those of `providers` serving it)."""
    if not providers:
        return [default]
    serving = [p for p in providers if model in scenario.providers[p].serves]
    return serving or [default]


def retry_pause(
    run: StepRun, backoff: BackoffSpec | None, retry: int, failed: list[Call | None]
) -> float | None:
    """Seconds to wait before retry number `retry` after the `failed` calls, or None when the
    deadline would come first (the retry is not made).

    Without `backoff`: a 429's Retry-After, else no wait. With it: `sim.backoff.retry_wait`
    (the longest Retry-After among the failed calls, if within its cap, else the jittered
    backoff)."""
    limited = [c.retry_after for c in failed if c is not None and c.outcome == OUTCOME_RATE_LIMITED]
    retry_after = max(limited) if limited else float("nan")
    if backoff is None:
        wait = retry_after if limited else 0.0
    else:
        wait = retry_wait(backoff, retry, run.jitter(retry), retry_after)
    if wait > 0 and wait >= run.time_left:
        return None
    return wait


class Sequential(Policy):
    """wait and cut: one attempt at a time, each cut at its give-up time, then the next."""

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

    def __init__(
        self,
        name: str,
        rounds: dict[str, list[list[Attempt]]],
        backoff: BackoffSpec | None = None,
    ) -> None:
        self.name = name
        self.rounds = rounds
        self.backoff = backoff

    def execute(self, run: StepRun) -> StepGenerator:
        attempt = 0
        for number, plans in enumerate(self.rounds[run.step.id]):
            if run.closed or (number > 0 and not run.may_retry()):
                return False
            started = []
            for j, plan in enumerate(plans):
                if j == 0 or run.may_hedge(plan.provider):
                    started.append(run.start(attempt, plan))
                attempt += 1
            pending = started
            while pending:
                yield run.env.any_of(pending)
                won, pending = _settle(run, pending)
                if won:
                    return True
            if self.backoff is not None and number + 1 < len(self.rounds[run.step.id]):
                wait = retry_pause(run, self.backoff, number + 1, [p.value for p in started])
                if wait is None:
                    return False
                if wait > 0:
                    yield run.env.timeout(wait)
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
            if fired < len(plans) and math.isfinite(next_fire):
                events.append(env.timeout(max(0.0, next_fire - env.now)))
            yield env.any_of(events)
            won, pending = _settle(run, pending)
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


def build_policy(
    name: str,
    spec: WaitPolicy | CutPolicy | RacePolicy | HedgePolicy | DownshiftPolicy,
    scenario: Scenario,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Policy:
    """The runtime policy of a spec, with its load-aware controls (if any)."""
    policy = _build_policy(name, spec, scenario, steps, seconds)
    policy.controls = spec.controls
    return policy


def _build_policy(
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
        return Sequential(name, plans, spec.backoff)
    if isinstance(spec, RacePolicy):
        rounds = {}
        for step in steps:
            route = _route(scenario, step.model, spec.providers, step.provider)
            one = [
                Attempt(route[j % len(route)], step.model, spec.timeout_s)
                for j in range(spec.attempts)
            ]
            rounds[step.id] = [one] * (spec.retries + 1)
        return Race(name, rounds, spec.backoff)
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
    return Sequential(name, plans, spec.backoff)
