"""The event engine's run of one step: the policy's handle on it, and what the step unlocks.

`StepRunner` runs a request's steps: a step goes to its policy (or, for a tool step, to the
tool desk) through a `StepHandle`, its delivered answer is recorded (quality, validity), and its
result resolves the steps after it (unlocked, or lost with the run failed). A chain of steps
costs one simpy process; a DAG one per branch. `StepHandle` is what a policy may do while it
runs a step (`sim.policy.plans.StepRun`): call inline, start a parallel attempt, cancel one, ask
the time left, read an attempt's `Flight` (what a streaming client sees of it); and what the
call maker asks of it (`attempt_limits`, `admits`, `refuse`). The runner is given what it uses:
the attempt maker (`sim.engine.event_calls.CallMaker`) at construction, and the run book's
`finish` (`sim.engine.event_runs.RunBook`) with each run it walks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import simpy

from sim.engine.kernel import Environment
from sim.model.flow import draw_id
from sim.model.rows import FAIL_NO_CALL, FAIL_REFUSED, Action, Call, Run
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step
from sim.plan import Plan
from sim.policy.actions import ToolDesk
from sim.policy.controls import Controls
from sim.policy.deadlines import BY_ATTEMPT, BY_LOSER, DeadlineRules, admits, attempt_limit
from sim.policy.plans import Attempt, Policy

_INF = math.inf
#: `Run.remaining` value of a step that can no longer run (a step it needs failed).
LOST = -1
#: How a step's run ends its request: `finish(run, ok, end)` (`sim.engine.event_runs.RunBook`).
Finish = Callable[["Run", bool, float], None]
#: What makes one attempt of a step: `attempt(handle, attempt, plan)`, a generator whose value is
#: the call (None if none was made) (`sim.engine.event_calls.CallMaker`).
AttemptMaker = Callable[["StepHandle", int, Attempt], Generator[simpy.Event, Any, "Call | None"]]
#: How a step with workflow keys runs: `flow(runner, run, step, finish)`, a generator that
#: resolves it and whose value is the steps it made ready (`sim.engine.event_flow.flow_step`).
FlowStep = Callable[["StepRunner", "Run", Step, Finish], Generator[simpy.Event, Any, list[Step]]]


class StepRunner:
    """A request's steps in the event engine: each run by its policy (or the tool desk), its
    answer recorded, what it unlocks started, and its run's end reported to the run book."""

    def __init__(
        self,
        env: Environment,
        plan: Plan,
        policy: Policy,
        bank: CallDrawBank,
        rules: DeadlineRules,
        controls: Controls | None,
        attempt: AttemptMaker,
        deadline_s: float,
        flow: FlowStep | None = None,
    ) -> None:
        self.env = env
        #: Runs a step with workflow keys (given by the simulation: that module imports this).
        self.flow = flow
        self.bank = bank
        self.workflow = plan.workflow
        self.policy = policy
        self.rules = rules
        self.controls = controls
        #: An attempt, made by the call maker (`sim.engine.event_calls`; under the controls'
        #: gate when they are on): a method of another object, so no reference cycle.
        self.attempt = attempt
        self.deadline_s = deadline_s
        self.model_quality = plan.model_quality
        #: Keep each attempt's `Flight` (only a policy reading streaming progress needs them).
        self.keeps_flights = policy.watches_flights
        #: The rules' parts every step handle reads (`DeadlineRules`), looked up once.
        self.propagate, self.reserve_s = rules.propagate, rules.reserve_s
        self.caps_attempts = rules.caps_attempts
        #: Per step index: nothing in the step itself or the rules to check per attempt (the
        #: rest of `StepHandle.plain` depends on the run).
        self.plain_steps = [
            s.budget_s == math.inf
            and s.attempt_budget_s is None
            and s.queue_budget_s is None
            and rules.expected is None
            for s in self.workflow.steps
        ]
        #: Tool steps' action records (empty without tool steps).
        self.actions: list[Action] = []
        self.tools = ToolDesk(env, bank, rules, self.workflow.steps, self.actions)

    def walk(
        self, run: Run, step: Step | None, finish: Finish
    ) -> Generator[simpy.Event, Any, None]:
        """Run a step, then go on with the first step it unlocks (others get processes of their
        own): a chain costs one process, a DAG one per branch. `finish` ends the run (the run
        book's, passed along rather than kept: no reference cycle between the two)."""
        env, execute, controls = self.env, self.policy.execute, self.controls
        while step is not None:
            if step.flow is not None:  # when / repeat / loop / map (`sim.engine.event_flow`)
                assert self.flow is not None, "a step with workflow keys needs the flow runner"
                ready = yield from self.flow(self, run, step, finish)
            else:
                handle = StepHandle(self, run, step)
                run.running = step.id
                began = env.now if controls is not None else 0.0
                if step.tool is None:
                    ok = yield from execute(handle)
                else:
                    ok = yield from self.tools.execute(handle)
                if ok and not run.closed:
                    self.record_answer(run, step, handle.answer)
                if controls is not None:
                    controls.step_ended(step.index, env.now - began, ok, self.deadline_s)
                ready = self.resolve(run, step, ok, handle.last_outcome or FAIL_NO_CALL, finish)
            if not ready:
                return
            step = ready[0]
            if len(ready) > 1:
                for other in ready[1:]:
                    env.process(self.walk(run, other, finish))

    def handle(self, run: Run, step: Step, iteration: int) -> StepHandle:
        """A handle for one run of `step` as iteration `iteration` (`sim.engine.event_flow`)."""
        return StepHandle(self, run, step, iteration)

    def record_answer(self, run: Run, step: Step, answer: Call | None) -> None:
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

    def resolve(self, run: Run, step: Step, ok: bool, outcome: str, finish: Finish) -> list[Step]:
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
                finish(run, not run.failed, self.env.now)
            elif self.env.now + reserve <= run.deadline_at or run.edge_done:
                finish(run, True, self.env.now + reserve)  # validated, delivered
            else:
                run.closed = True  # nothing left to run, but too late to deliver: its deadline
            return []  # will fail it
        return ready


#: The (read-only, always empty) flights of a step whose policy does not read them.
_NO_FLIGHTS: MappingProxyType[int, Flight] = MappingProxyType({})


class StepHandle:
    """The engine's handle for a policy running one step of one run."""

    __slots__ = ("answer", "draw_id", "env", "flights", "iteration", "known_end", "last_outcome",
                 "plain", "received", "run", "runner", "step", "step_end", "stopped", "tracked",
                 "work_end")  # fmt: skip

    def __init__(self, runner: StepRunner, run: Run, step: Step, iteration: int = 0) -> None:
        self.runner = runner
        #: Which iteration (loop), copy (map) or ask (repeat) of the step this is (0: the only
        #: one without those keys), and the key its draws come from (the step's id for 0).
        self.iteration = iteration
        self.draw_id = draw_id(step.id, iteration)
        #: A map copy no longer needed (the join has its answers): it starts nothing more.
        self.stopped = False
        #: A map copy's attempts in flight (None: not a copy), so it can be cancelled alone.
        self.tracked: set[simpy.Process] | None = None
        self.env = env = runner.env
        self.run = run
        self.step = step
        self.last_outcome = ""  # outcome of this step's call that ended last
        self.answer: Call | None = None  # the answer the step delivers (last ok by default)
        #: Output tokens of the step's answer received so far by calls cut or broken
        #: mid-stream (kept only under a policy with `resume`: its retries ask for the rest).
        self.received = 0
        #: Every attempt's call and its drawn times (kept only for a policy that reads them).
        self.flights: dict[int, Flight] | MappingProxyType[int, Flight] = (
            {} if runner.keeps_flights else _NO_FLIGHTS
        )
        #: The end of the request's time as this step's work knows it: the deadline less the
        #: reserve with propagation; without, the work does not know the deadline (inf).
        self.known_end = run.deadline_at - runner.reserve_s if runner.propagate else _INF
        if step.budget_s == _INF and not runner.caps_attempts:  # the common case, written out
            self.step_end = self.work_end = _INF
            self.plain = runner.plain_steps[step.index]
            return
        #: When this step's budget runs out (inf: no step budget).
        self.step_end = env.now + step.budget_s
        #: Where attempts are cut for the request's time (inf: the deadline cancels them).
        self.work_end = self.known_end if runner.caps_attempts else _INF
        #: Nothing to check per attempt: the fast path (the step's and the rules' part of
        #: this is fixed per simulation, in `StepRunner.plain_steps`).
        self.plain = (
            runner.plain_steps[step.index] and self.step_end == _INF and self.work_end == _INF
        )

    @property
    def closed(self) -> bool:
        return self.stopped or self.run.closed

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
        expected = self.runner.rules.expected
        if expected is None or admits(self.time_left, wait, expected[self.step.id]):
            return True
        self.refuse(attempt, sdk)
        return False

    def attempt_limits(self, attempt: int, plan: Attempt) -> AttemptLimits | None:
        """How long an attempt starting now may run and which budget binds, or None (counted)
        when it is refused: no time left at all, or (admission) too little to finish."""
        limit, by = self.limit(plan.give_up_after, None)
        if limit is not None and limit <= 0:  # no time left at all: start nothing
            self.refuse(attempt)
            return None
        if not self.admits(0.0, attempt):  # cannot finish in the time left
            return None
        expected = self.runner.rules.expected
        start_by = math.inf  # picked up later, it cannot finish in time: it refuses
        step = self.step
        if expected is not None:
            start_by = min(self.known_end, self.step_end) - expected[step.id]
        return AttemptLimits(limit, step.queue_budget_s, start_by, by, step.attempt_budget_s)

    def refuse(self, attempt: int, sdk: int = 0) -> None:
        """Count an attempt refused for lack of time (a step's first, or a retry)."""
        if attempt == 0 and sdk == 0:
            self.run.refused_starts += 1
        else:
            self.run.refused_retries += 1
        if not self.last_outcome:
            self.last_outcome = FAIL_REFUSED

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        return self.runner.attempt(self, attempt, plan)

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        return self.env.process(self.call(attempt, plan))

    def cancel(self, process: simpy.Process) -> None:
        cancel(self.run, process, BY_LOSER)

    def may_retry(self) -> bool:
        controls = self.runner.controls
        return controls is None or controls.may_retry()

    def may_hedge(self, provider: str) -> bool:
        controls = self.runner.controls
        return controls is None or controls.may_hedge(provider)

    def jitter(self, retry: int) -> float:
        """This run's backoff-jitter uniform for the step's retry number `retry` (the same
        under every policy)."""
        return self.runner.bank.uniform(
            self.run.index, "backoff", self.draw_id, retry, self.run.resend
        )

    def uniform(self, stream: str, number: int) -> float:
        """This run's uniform `number` of the step's named stream `stream` (the same under every
        policy that reads it)."""
        return self.runner.bank.uniform(
            self.run.index, stream, self.draw_id, number, self.run.resend
        )

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


@dataclass(frozen=True, slots=True)
class AttemptLimits:
    """An attempt's limits when a budget, a reserve or admission is set (see
    `sim.engine.event_calls.serve`): its cut, its queue budget, the latest pickup that can still
    finish, the budget that binds the cut (its `ended_by`), its service budget from the grant."""

    give_up_after: float | None = None
    queue: float | None = None
    start_by: float = math.inf
    by: str = BY_ATTEMPT
    service: float | None = None


#: The limits of an attempt on the fast path (no budget, reserve or admission).
NO_LIMITS = AttemptLimits()


def cancel(run: Run, process: simpy.Process, cause: str) -> None:
    """Cancel one of `run`'s attempts in flight: its process is interrupted (its call's slot is
    freed at once, its bill settled as the scenario says), `cause` becoming its `ended_by`."""
    if process in run.active and process.is_alive:
        run.active.discard(process)
        process.interrupt(cause)
