"""How one step is executed under each policy: wait, cut, race, hedge, downshift, adaptive,
draft, or a different one per step.

Each policy is a small object whose `execute` is a simpy generator driving one step through a
`StepRun` (the engine's handle: call inline, start a parallel call, cancel one, time left). The
route of every attempt (which provider, which model, cut after how long) is a pure decision made
up front in plans (`sim.policy.plans`, built from the specs by `sim.policy.build`), so the simpy
part here stays short.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import simpy

from sim.model.backoff import retry_wait
from sim.model.config import BackoffSpec
from sim.model.rows import (
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TRUNCATED,
    Call,
)
from sim.policy.plans import AdaptivePlan, Attempt, DraftPlan, Policy, StepGenerator, StepRun


def retry_pause(
    run: StepRun, backoff: BackoffSpec | None, retry: int, failed: list[Call | None]
) -> float | None:
    """Seconds to wait before retry number `retry` after the `failed` calls, or None when the
    deadline would come first (the retry is not made).

    Without `backoff`: a 429's Retry-After, else no wait. With it: `sim.model.backoff.retry_wait`
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
    if not run.admits(wait):  # the time left cannot fund the wait and an attempt
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
    still, won = [], False
    for process in pending:  # (a loop, not a list and an `any` over a generator: hot path)
        if not process.triggered:
            still.append(process)
        elif not won:
            call = process.value
            won = call is not None and call.outcome == OUTCOME_OK
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


#: Relative slack under which a timer counts as due (float rounding of simulated times).
_DUE = 1e-9


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
            if info.ttft_check is not None and now >= info.ttft_check - _DUE:
                info.ttft_check = None
                if not run.first_token(info.attempt):
                    launch(info.model)  # stuck, not slow: a fresh attempt is newly scheduled
            if info.hedge_check is not None and now >= info.hedge_check - _DUE:
                info.hedge_check = None
                launch(info.model)
            if info.cutoff_check is not None and now >= info.cutoff_check - _DUE:
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
            if held is not None and (primary not in live or env.now >= window_ends - _DUE):
                if primary in live:
                    run.cancel(primary)
                run.note_draft(kept=True)
                run.accept(held)
                return True


class PerStep(Policy):
    """A different runtime policy per step (a policy with per-step entries)."""

    def __init__(self, name: str, by_step: dict[str, Policy]) -> None:
        self.name = name
        self.by_step = by_step
        self.watches_flights = any(p.watches_flights for p in by_step.values())

    def execute(self, run: StepRun) -> StepGenerator:
        return self.by_step[run.step.id].execute(run)
