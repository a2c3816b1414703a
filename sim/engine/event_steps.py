"""The event engine's run of one step: the policy's handle on it, and what the step unlocks.

`EventSteps` is the part of `sim.engine.simulation.Simulation` that runs a request's steps: a
step goes to its policy (or, for a tool step, to the tool desk) through a `StepHandle`, its
delivered answer is recorded (quality, validity), and its result resolves the steps after it
(unlocked, or lost with the run failed). A chain of steps costs one simpy process; a DAG one per
branch. `StepHandle` is what a policy may do while it runs a step (`sim.policy.kinds.StepRun`):
call inline, start a parallel attempt, cancel one, ask the time left, read an attempt's
`Flight` (what a streaming client sees of it). The call itself is `EventCalls._call`
(`sim.engine.event_calls`); a run's end is `RunBook._finish` (`sim.engine.event_runs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import simpy

from sim.engine.event_runs import RunBook
from sim.model.provider import Call, Environment
from sim.model.rows import FAIL_NO_CALL, FAIL_REFUSED, Action, Run
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step, Workflow
from sim.policy.actions import ToolDesk
from sim.policy.controls import Controls
from sim.policy.deadlines import BY_LOSER, DeadlineRules, admits, attempt_limit
from sim.policy.plans import Attempt, Policy

_INF = math.inf
#: `Run.remaining` value of a step that can no longer run (a step it needs failed).
LOST = -1


class EventSteps:
    """A step's run in the event engine (a mixin of `Simulation`)."""

    # The state this job reads, set by `Simulation.__init__` (and `_setup_steps` below).
    env: Environment
    bank: CallDrawBank
    workflow: Workflow
    deadline_s: float
    policy: Policy
    rules: DeadlineRules
    controls: Controls | None
    actions: list[Action]
    keeps_flights: bool
    propagate: bool
    reserve_s: float
    caps_attempts: bool
    plain_steps: list[bool]
    tools: ToolDesk
    model_quality: dict[str, float]
    #: An attempt, plain or under controls (`EventCalls`), and a run's end (`RunBook`).
    _call: Callable[[StepHandle, int, Attempt], Generator[simpy.Event, Any, Call | None]]
    _controlled_call: Callable[[StepHandle, int, Attempt], Generator[simpy.Event, Any, Call | None]]
    _finish: Callable[..., None]

    def _setup_steps(self, policy: Policy) -> None:
        """What every step's handle reads, looked up once per simulation, and the tool desk."""
        #: Keep each attempt's `Flight` (only a policy reading streaming progress needs them).
        self.keeps_flights = policy.watches_flights
        #: The rules' parts every step handle reads (`DeadlineRules`), looked up once.
        self.propagate, self.reserve_s = self.rules.propagate, self.rules.reserve_s
        self.caps_attempts = self.rules.caps_attempts
        #: Per step index: nothing in the step itself or the rules to check per attempt (the
        #: rest of `StepHandle.plain` depends on the run).
        self.plain_steps = [
            s.budget_s == math.inf
            and s.attempt_budget_s is None
            and s.queue_budget_s is None
            and self.rules.expected is None
            for s in self.workflow.steps
        ]
        self.tools = ToolDesk(self.env, self.bank, self.rules, self.workflow.steps, self.actions)

    def _step(self, run: Run, step: Step | None) -> Generator[simpy.Event, Any, None]:
        """Run a step, then go on with the first step it unlocks (others get processes of their
        own): a chain costs one process, a DAG one per branch."""
        env, execute, controls = self.env, self.policy.execute, self.controls
        while step is not None:
            handle = StepHandle(self, run, step)
            run.running = step.id
            began = env.now if controls is not None else 0.0
            if step.tool is None:
                ok = yield from execute(handle)
            else:
                ok = yield from self.tools.execute(handle)
            if ok and not run.closed:
                self._answered(run, step, handle.answer)
            if controls is not None:
                controls.step_ended(step.index, env.now - began, ok, self.deadline_s)
            ready = self._resolve(run, step, ok, handle.last_outcome or FAIL_NO_CALL)
            if not ready:
                return
            step = ready[0]
            if len(ready) > 1:
                for other in ready[1:]:
                    env.process(self._step(run, other))

    def _answered(self, run: Run, step: Step, answer: Call | None) -> None:
        """Record the answer a step delivered: its model's quality, and whether it is valid
        (an invalid answer, or one built on an invalid one, breaks quality, not latency)."""
        if answer is None:
            return
        run.answered += 1
        run.quality_sum += self.model_quality[answer.model]
        valid_steps = run.valid_steps
        valid = answer.valid
        if valid:  # and everything it was built on (as `all`, without a generator per step)
            for d in step.depends_on:
                if not valid_steps[d]:
                    valid = False
                    break
        valid_steps[step.index] = valid

    def _resolve(self, run: Run, step: Step, ok: bool, outcome: str) -> list[Step]:
        """Record a step's result and return the steps it made ready; fail the request if the
        step (or a required step that now cannot run) mattered, with `outcome` as the reason."""
        if run.closed:
            return []
        run.unresolved -= 1
        ready = []
        remaining = run.remaining
        if ok:
            for i in step.unlocks:
                if remaining[i] > 0:  # LOST steps (< 0) never start
                    remaining[i] -= 1
                    if remaining[i] == 0:
                        ready.append(self.workflow.steps[i])
        else:
            if step.required:
                run.failed = True
            for i in self.workflow.downstream(step.index):
                if remaining[i] != LOST:  # a step can be lost through two failed branches
                    remaining[i] = LOST
                    run.unresolved -= 1
                    run.failed = run.failed or self.workflow.steps[i].required
        if run.failed and not run.fail_reason:
            run.fail_reason, run.fail_step = outcome, step.id
        if run.failed or run.unresolved == 0:
            reserve = self.rules.reserve_s
            if run.failed or reserve == 0:
                self._finish(run, ok=not run.failed, end=self.env.now)
            elif self.env.now + reserve <= run.deadline_at or run.edge_done:
                self._finish(run, ok=True, end=self.env.now + reserve)  # validated, delivered
            else:
                run.closed = True  # nothing left to run, but too late to deliver: its deadline
            return []  # will fail it
        return ready


#: The (read-only, always empty) flights of a step whose policy does not read them.
_NO_FLIGHTS: MappingProxyType[int, Flight] = MappingProxyType({})


class StepHandle:
    """The engine's handle for a policy running one step of one run."""

    __slots__ = ("answer", "env", "flights", "known_end", "last_outcome", "plain", "run", "sim",
                 "step", "step_end", "work_end")  # fmt: skip

    def __init__(self, sim: EventSteps, run: Run, step: Step) -> None:
        self.sim = sim
        self.env = env = sim.env
        self.run = run
        self.step = step
        self.last_outcome = ""  # outcome of this step's call that ended last
        self.answer: Call | None = None  # the answer the step delivers (last ok by default)
        #: Every attempt's call and its drawn times (kept only for a policy that reads them).
        self.flights: dict[int, Flight] | MappingProxyType[int, Flight] = (
            {} if sim.keeps_flights else _NO_FLIGHTS
        )
        #: The end of the request's time as this step's work knows it: the deadline less the
        #: reserve with propagation; without, the work does not know the deadline (inf).
        self.known_end = run.deadline_at - sim.reserve_s if sim.propagate else _INF
        if step.budget_s == _INF and not sim.caps_attempts:  # the common case, written out
            self.step_end = self.work_end = _INF
            self.plain = sim.plain_steps[step.index]
            return
        #: When this step's budget runs out (inf: no step budget).
        self.step_end = env.now + step.budget_s
        #: Where attempts are cut for the request's time (inf: the deadline cancels them).
        self.work_end = self.known_end if sim.caps_attempts else _INF
        #: Nothing to check per attempt: the fast path (the step's and the rules' part of
        #: this is fixed per simulation, in `EventSteps.plain_steps`).
        self.plain = sim.plain_steps[step.index] and self.step_end == _INF and self.work_end == _INF

    @property
    def closed(self) -> bool:
        return self.run.closed

    @property
    def time_left(self) -> float:
        """Seconds this step's work may still use: until the request's deadline less the reserve
        (inf without propagation: the work does not know it) or its step budget, if sooner."""
        return min(self.known_end, self.step_end) - self.env.now

    def limit(self, own: float | None, attempt_budget: float | None) -> tuple[float | None, str]:
        """(seconds an attempt starting now may run, the budget that binds): see
        `sim.policy.deadlines.attempt_limit` (an LLM call's attempt budget is counted from its slot
        grant, by the provider, so it passes None here)."""
        return attempt_limit(self.env.now, own, attempt_budget, self.step_end, self.work_end)

    def admits(self, wait: float, attempt: int = 1, sdk: int = 0) -> bool:
        """Deadline-aware admission of an attempt after `wait` seconds: True when admission is
        off or the time left exceeds the wait plus the step's expected attempt time; a refusal
        is counted on the run."""
        expected = self.sim.rules.expected
        if expected is None or admits(self.time_left, wait, expected[self.step.id]):
            return True
        self.refuse(attempt, sdk)
        return False

    def refuse(self, attempt: int, sdk: int = 0) -> None:
        """Count an attempt refused for lack of time (a step's first, or a retry)."""
        if attempt == 0 and sdk == 0:
            self.run.refused_starts += 1
        else:
            self.run.refused_retries += 1
        if not self.last_outcome:
            self.last_outcome = FAIL_REFUSED

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        sim = self.sim  # (chosen here, not by a bound method kept on the simulation: no cycle)
        if sim.controls is None:
            return sim._call(self, attempt, plan)
        return sim._controlled_call(self, attempt, plan)

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        return self.env.process(self.call(attempt, plan))

    def cancel(self, process: simpy.Process) -> None:
        RunBook._cancel(self.run, process, BY_LOSER)

    def may_retry(self) -> bool:
        controls = self.sim.controls
        return controls is None or controls.may_retry()

    def may_hedge(self, provider: str) -> bool:
        controls = self.sim.controls
        return controls is None or controls.may_hedge(provider)

    def jitter(self, retry: int) -> float:
        """This run's backoff-jitter uniform for the step's retry number `retry` (the same
        under every policy)."""
        return self.sim.bank.uniform(
            self.run.index, "backoff", self.step.id, retry, self.run.resend
        )

    def uniform(self, stream: str, number: int) -> float:
        """This run's uniform `number` of the step's named stream `stream` (the same under every
        policy that reads it)."""
        return self.sim.bank.uniform(self.run.index, stream, self.step.id, number, self.run.resend)

    def accept(self, call: Call) -> None:
        """The step delivers this call's answer (a draft kept, or the primary's upgrade)."""
        self.answer = call

    def note_draft(self, kept: bool) -> None:
        """Count a draft race's result: the draft kept, or upgraded to the primary's answer."""
        if kept:
            self.run.drafts_kept += 1
        else:
            self.run.drafts_upgraded += 1

    def first_token(self, attempt: int) -> bool:
        """True once attempt `attempt` has streamed its first token (what a client sees)."""
        flight = self.flights.get(attempt)
        return flight is not None and flight.first_token_at() <= self.env.now

    def projected_left(self, attempt: int) -> float:
        """Seconds attempt `attempt` still needs at the rate its tokens flowed over the last
        second (inf with no first token yet or no token in the last second): what a streaming
        client can estimate, not the drawn truth."""
        flight = self.flights.get(attempt)
        return math.inf if flight is None else flight.projected_left(self.env.now, self.step)


@dataclass(slots=True)
class Flight:
    """An attempt's call and its drawn times, to tell what a streaming client sees of it."""

    call: Call
    ttft: float
    generation: float
    stall: float

    def first_token_at(self) -> float:
        """When the first token arrives (inf while still queued or once cut before it)."""
        call = self.call
        if math.isnan(call.queue):  # still queued
            return math.inf
        at = call.start + call.queue + self.ttft
        return math.inf if call.outcome and call.end < at else at

    def emitted(self, at: float) -> float:
        """Tokens streamed by time `at`: evenly over generation, with the stall at mid-stream."""
        tau = at - self.first_token_at()
        tokens, g, s = self.call.output_tokens, self.generation, self.stall
        if tau <= 0:
            return 0.0
        if g <= 0 or tau >= g + s:
            return float(tokens)
        if tau <= g / 2:
            return tokens * tau / g
        if tau <= g / 2 + s:
            return tokens / 2
        return tokens * (tau - s) / g

    def projected_left(self, now: float, step: Step) -> float:
        """Seconds left at the last second's token rate towards the expected length."""
        if self.call.outcome or self.first_token_at() > now:
            return 0.0 if self.call.outcome else math.inf
        window = min(1.0, now - self.first_token_at())
        done = self.emitted(now)
        rate = (done - self.emitted(now - window)) / window if window > 0 else 0.0
        target = max(float(step.output_tokens), done)
        if target - done <= 0:
            return 0.0
        return (target - done) / rate if rate > 0 else math.inf
