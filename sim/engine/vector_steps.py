"""The vectorized engine's policies: one step for many requests, attempt by attempt.

`VectorSteps` is the part of `sim.engine.vectorized.VectorizedSimulation` that runs one step of
the workflow for every request that reached it, under the policy: the policy's vectorized twin
(`run_vector`, in its kind's module of `sim.policy.kinds`) picks one of three ways through this
handle (`sim.policy.vector.VectorRun`):
`in_turn` (wait, cut, downshift: attempts one after another), `in_rounds` (rounds of attempts
started together, the first valid answer wins) and `on_timer` (a further attempt each time a
timer fires, wake-up by wake-up). Each attempt is a call slot lived uninterrupted
(`VectorDraws._attempt`; on a provider whose client acts on its own, its calls and sleeps:
`sim.engine.vector_client`); the policy decides who wins, who is cancelled and when (a loser,
the deadline), logs the slot's calls with those cancellations (`VectorCalls._log`), and returns
how the step ended per request (`_StepResult`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.engine.vector_calls import O_OK, put_masked
from sim.model.workflow import Step
from sim.policy.plans import Attempt, Policy

# Step states per request.
S_NONE, S_OK, S_FAILED, S_DEADLINE = (
    0,
    1,
    2,
    3,
)  # not started / succeeded / failed / cut by deadline


@dataclass
class _StepResult:
    """How one step ended for the requests that started it (arrays aligned with their rows)."""

    state: np.ndarray  # S_OK / S_FAILED / S_DEADLINE
    end: np.ndarray  # when it resolved (the deadline for S_DEADLINE)
    last: np.ndarray  # outcome code of its call that ended last (the reason of a failure)


class VectorSteps:
    """A step's run under the policy in the vectorized engine (a mixin of
    `VectorizedSimulation`)."""

    # The state this job reads, set by `VectorizedSimulation.__init__`.
    policy: Policy
    #: A call slot's uninterrupted life (`VectorDraws`) and its record (`VectorCalls`).
    _attempt: Callable[
        [Step, int, Attempt, np.ndarray, np.ndarray, np.ndarray],
        tuple[np.ndarray, np.ndarray, np.ndarray, Any],
    ]
    _log: Callable[..., None]
    #: Requests whose order of simultaneous events only simpy can tell (the event engine
    #: replays them; see `_unclear_last`).
    _unclear: list[np.ndarray]

    def _step(
        self, step: Step, rows: np.ndarray, start: np.ndarray, deadline: np.ndarray
    ) -> _StepResult:
        return self.policy.run_vector(self, step, rows, start, deadline)

    # The ways to run attempts a kind's vectorized twin picks from (`sim.policy.vector`).
    def in_turn(
        self, step: Step, plans: list[Attempt], rows: np.ndarray, start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:  # fmt: skip
        """One attempt at a time (wait, cut, downshift)."""
        return self._sequential(step, plans, rows, start, deadline)

    def in_rounds(
        self, step: Step, rounds: list[list[Attempt]], rows: np.ndarray, start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:  # fmt: skip
        """Rounds of attempts started together (race)."""
        return self._race(step, rounds, rows, start, deadline)

    def on_timer(
        self, step: Step, plans: list[Attempt], after: float, rows: np.ndarray,
        start: np.ndarray, deadline: np.ndarray,
    ) -> _StepResult:  # fmt: skip
        """A further attempt each time a timer fires (hedge)."""
        return self._hedge(step, plans, after, rows, start, deadline)

    def _sequential(
        self,
        step: Step,
        plans: list[Attempt],
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """wait / cut / downshift: attempts one after another, the next at the previous end.
        A call still going at the deadline (or ending exactly at it) is cancelled there."""
        m, final = len(rows), len(plans) - 1
        last = np.zeros(m, np.int8)
        # The first attempt runs for every row (no gathers); `end` starts as its resolution,
        # a row that failed it being resolved again by a later attempt.
        natural, kind, outcome, billing = self._attempt(step, 0, plans[0], rows, start, deadline)
        cancelled = natural >= deadline
        cancel_at = np.where(cancelled, deadline, np.inf)
        self._log(step, 0, plans[0], rows, start, natural, kind, billing, cancel_at, deadline)
        won = ~cancelled & (outcome == O_OK)
        failed = ~cancelled & ~won
        state = np.zeros(m, np.int8)
        np.copyto(state, S_OK, where=won)
        np.copyto(state, S_DEADLINE, where=cancelled)
        end = np.minimum(natural, cancel_at)  # the deadline where cancelled (natural >= it)
        pos = np.flatnonzero(failed)
        if final == 0:
            state[pos], last[pos] = S_FAILED, outcome[pos]
            return _StepResult(state, end, last)
        t = natural[pos]  # the later attempts: rows `pos`, starting at `t`
        for k, plan in enumerate(plans[1:], start=1):
            if not len(pos):
                break
            its, dl = rows[pos], deadline[pos]
            natural, kind, outcome, billing = self._attempt(step, k, plan, its, t, dl)
            cancelled = natural >= dl
            cancel_at = np.where(cancelled, dl, np.inf)
            self._log(step, k, plan, its, t, natural, kind, billing, cancel_at, dl)
            won = ~cancelled & (outcome == O_OK)
            failed = ~cancelled & ~won
            state[pos[cancelled]], end[pos[cancelled]] = S_DEADLINE, dl[cancelled]
            state[pos[won]], end[pos[won]] = S_OK, natural[won]
            if k == final:
                state[pos[failed]], end[pos[failed]] = S_FAILED, natural[failed]
                last[pos[failed]] = outcome[failed]
            pos, t = pos[failed], natural[failed]
        return _StepResult(state, end, last)

    def _race(
        self,
        step: Step,
        rounds: list[list[Attempt]],
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """race: rounds of attempts started together; the first valid answer wins, attempts
        ending at that same instant complete, later ones are cancelled; a round that fails
        starts the next as its last attempt ends."""
        m = len(rows)
        state, end, last = np.zeros(m, np.int8), np.full(m, np.nan), np.zeros(m, np.int8)
        pos: np.ndarray | None = None  # the rows still racing (None: all, the first round)
        its, at, dl, attempt = rows, start, deadline, 0
        for r, plans in enumerate(rounds):
            lives = [self._attempt(step, attempt + j, p, its, at, dl) for j, p in enumerate(plans)]
            naturals, outcomes = [life[0] for life in lives], [life[2] for life in lives]
            first_ok = np.where(outcomes[0] == O_OK, naturals[0], np.inf)
            last_end = naturals[0]
            for natural, outcome in zip(naturals[1:], outcomes[1:], strict=True):
                np.minimum(first_ok, np.where(outcome == O_OK, natural, np.inf), out=first_ok)
                last_end = np.maximum(last_end, natural)
            any_ok = first_ok < np.inf
            round_end = np.where(any_ok, first_ok, last_end)
            hit = round_end >= dl
            won = any_ok & ~hit
            for j, plan in enumerate(plans):
                natural, kind, _, billing = lives[j]
                cancel_at = np.full(len(natural), np.inf)
                # losers (half the rows, at random) cancelled by the winner
                put_masked(cancel_at, won & (natural > first_ok), first_ok)
                put_masked(cancel_at, hit & (natural >= dl), dl)
                self._log(step, attempt + j, plan, its, at, natural, kind, billing, cancel_at, dl)
            attempt += len(plans)
            if pos is None:
                np.copyto(state, S_DEADLINE, where=hit)
                np.copyto(end, dl, where=hit)
                np.copyto(state, S_OK, where=won)
                np.copyto(end, first_ok, where=won)
            else:
                state[pos[hit]], end[pos[hit]] = S_DEADLINE, dl[hit]
                state[pos[won]], end[pos[won]] = S_OK, first_ok[won]
            failed = np.flatnonzero(~any_ok & ~hit)
            lost = failed if pos is None else pos[failed]
            if r == len(rounds) - 1 and len(failed):
                # the reason is the outcome of the attempt that ended last (ties: started last)
                ends = np.stack([natural[failed] for natural in naturals])
                latest = len(plans) - 1 - np.argmax(ends[::-1], axis=0)
                reason = np.stack([outcome[failed] for outcome in outcomes])
                state[lost], end[lost] = S_FAILED, last_end[failed]
                last[lost] = reason[latest, np.arange(len(failed))]
                if any(not isinstance(life[3], tuple) for life in lives):
                    self._unclear_last(its[failed], ends, reason)
            if not len(failed):
                break
            pos, at = lost, last_end[failed]
            its, dl = rows[pos], deadline[pos]
        return _StepResult(state, end, last)

    def _hedge(
        self,
        step: Step,
        plans: list[Attempt],
        delay: float,
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """hedge: as `Hedge.execute`, wake-up by wake-up: the earliest of a pending call's end and
        the timer (re-armed at every wake-up as now + max(0, next_fire - now)); every call ending
        by then counts; a valid answer wins (the rest cancelled); otherwise the next hedge fires
        if none is pending or the fire time has come.

        One function (about 90 lines) on purpose: the wake-up loop, `fire` and the final log
        share nine (request, attempt) arrays that the loop updates in place; split, they would
        travel as arguments or in a state object, and the loop reads best whole."""
        m, size = len(rows), len(plans)
        natural = np.full((m, size), np.inf)
        begun = np.full((m, size), np.nan)
        outcome = np.zeros((m, size), np.int8)
        kind = np.zeros((m, size), np.int8)
        drawn = np.zeros((m, size), np.int8)
        ttft = np.zeros((m, size))
        generating = np.zeros((m, size))
        cancel = np.full((m, size), np.inf)
        done = np.zeros((m, size), dtype=bool)
        fired = np.zeros(m, dtype=np.int64)
        clients: list[tuple[int, np.ndarray, Any]] = []  # (attempt, rows, life) on a client

        def fire(pos: np.ndarray, at: np.ndarray) -> None:
            for c in np.unique(fired[pos]).tolist():
                group = fired[pos] == c
                p, when = pos[group], at[group]
                life = self._attempt(step, c, plans[c], rows[p], when, deadline[p])
                natural[p, c], kind[p, c], outcome[p, c] = life[0], life[1], life[2]
                if isinstance(life[3], tuple):
                    drawn[p, c], ttft[p, c], generating[p, c] = life[3]
                else:
                    clients.append((c, p, life[3]))
                begun[p, c] = when
                fired[p] = c + 1

        fire(np.arange(m), start)
        now, next_fire = start.copy(), start + delay
        state, end, last = np.zeros(m, np.int8), np.full(m, np.nan), np.zeros(m, np.int8)
        act = np.arange(m)
        slots = np.arange(size)
        while len(act):
            started = slots[None, :] < fired[act, None]
            pending = started & ~done[act]
            pending_end = np.where(pending, natural[act], np.inf).min(axis=1)
            timer = np.where(
                fired[act] < size,
                now[act] + np.maximum(0.0, next_fire[act] - now[act]),
                np.inf,
            )
            wake = np.minimum(pending_end, timer)
            dl = deadline[act]
            hit = wake >= dl
            gone = act[hit]
            cancel[gone] = np.where(pending[hit], dl[hit, None], cancel[gone])
            state[gone], end[gone] = S_DEADLINE, dl[hit]
            act, wake, pending = act[~hit], wake[~hit], pending[~hit]
            ended = pending & (natural[act] <= wake[:, None])
            done[act] |= ended
            won = (ended & (outcome[act] == O_OK)).any(axis=1)
            winners = act[won]
            still = pending & ~ended
            cancel[winners] = np.where(still[won], wake[won, None], cancel[winners])
            state[winners], end[winners] = S_OK, wake[won]
            act, wake, still = act[~won], wake[~won], still[~won]
            now[act] = wake
            waiting = still.any(axis=1)
            fires = (fired[act] < size) & (~waiting | (wake >= next_fire[act]))
            fire(act[fires], wake[fires])
            next_fire[act[fires]] = wake[fires] + delay
            over = ~waiting & ~fires
            lost = act[over]
            if len(lost):
                ends = np.where(slots[None, :] < fired[lost, None], natural[lost], -np.inf)
                latest = size - 1 - np.argmax(ends[:, ::-1], axis=1)
                state[lost], end[lost] = S_FAILED, wake[over]
                last[lost] = outcome[lost, latest]
                if clients:
                    self._unclear_last(rows[lost], ends.T, outcome[lost].T)
            act = act[~over]
        for c, p, life in clients:
            self._log(
                step, c, plans[c], rows[p], begun[p, c], natural[p, c], kind[p, c], life,
                cancel[p, c], deadline[p],
            )  # fmt: skip
        logged = {c for c, _, _ in clients}
        for c, plan in enumerate(plans):
            if c in logged:
                continue
            p = np.flatnonzero(fired > c)
            self._log(
                step, c, plan, rows[p], begun[p, c], natural[p, c], kind[p, c],
                (drawn[p, c], ttft[p, c], generating[p, c]), cancel[p, c], deadline[p],
            )  # fmt: skip
        return _StepResult(state, end, last)

    def _unclear_last(self, rows: np.ndarray, ends: np.ndarray, outcomes: np.ndarray) -> None:
        """Note the failed requests `rows` whose reason is not clear: attempts (axis 0 of `ends`
        and `outcomes`) that ended last together with different outcomes. Which one the event
        engine reads last is its event order: with a client's retries and sleeps the last
        events of two attempts may be scheduled at other instants than their starts."""
        top = ends == ends.max(axis=0)
        lowest = np.where(top, outcomes, np.iinfo(np.int8).max).min(axis=0)
        highest = np.where(top, outcomes, np.iinfo(np.int8).min).max(axis=0)
        differ = lowest != highest
        if differ.any():
            self._unclear.append(rows[differ])
