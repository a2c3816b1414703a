"""The simulated providers behind the HTTP transport: each call lived on the engine's own parts.

`Service` holds one drive's simpy environment, the scenario's providers (slots, quotas, laws,
bad spells: `sim.engine.simulation.build_providers`) and the engine's `CallMaker`, whose draws
(common random numbers, keyed per request, step and call) it uses, and lives each HTTP call
with the engine's `serve`: a 429 with its Retry-After, the queue for a slot, service, a cut at
the client's read timeout, and cancellation when the client gives up (billed as the scenario
says). So a call here and a call of `tailsim run` are the same code on the same draws; only
who decides what to call differs.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from sim.engine.event_calls import CallMaker
from sim.engine.event_serve import serve
from sim.engine.kernel import Environment
from sim.engine.simulation import build_providers
from sim.model.flow import draw_id
from sim.model.rows import (
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Call,
    Run,
)
from sim.model.streams import CallDrawBank, Streams
from sim.model.workflow import Step
from sim.plan import Plan
from sim.policy.plans import Attempt

#: The run (one send of one request) the code running now works for: set per request task,
#: so calls made from tasks it starts (a hedge, a race) count for the same request.
CURRENT_RUN: contextvars.ContextVar[Run] = contextvars.ContextVar("tailsim_run")
#: The header naming a call's workflow step (else: the first LLM step not yet answered).
STEP_HEADER = "x-tailsim-step"
#: The `ended_by` of a call the client code cancelled before its request's deadline.
BY_CLIENT = "client"
#: ... and of one still in flight when its request's deadline passed.
BY_DEADLINE = "deadline"
#: The cause a stream's read timeout interrupts its call with (recorded as a timeout, `sdk`).
BY_READ_TIMEOUT = "read_timeout"
#: ... and mid-stream, once tokens had come (the engine's idle cut).
BY_READ_IDLE = "read_idle"
#: The `ended_by` each read timeout is recorded with, as the engine labels the client's cuts:
#: before the first token `sdk` (the client's own timeout), mid-stream `idle`.
READ_TIMEOUTS = {BY_READ_TIMEOUT: "sdk", BY_READ_IDLE: "idle"}


class ServiceError(ValueError):
    """A call the simulated provider cannot serve (unknown step or model): a 4xx answer."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass(slots=True)
class _Handle:
    """What the engine's `CallMaker._prepare` reads of a step's run (its `StepHandle`)."""

    run: Run
    step: Step
    draw_id: str
    iteration: int = 0
    received: int = 0
    flights: dict[int, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RunState:
    """Per run: how many calls each step has made (the key of each call's draws) and each
    step's last answered call (its validity and model make the run's quality)."""

    calls: dict[str, int] = field(default_factory=dict)
    answers: dict[str, Call] = field(default_factory=dict)


class Service:
    """Every simulated provider of one drive, and every call made on them."""

    def __init__(self, plan: Plan, bank: CallDrawBank, streams: Streams) -> None:
        self.env = env = Environment()
        self.plan = plan
        self.providers = build_providers(env, plan, streams)
        self.maker = CallMaker(env, plan, bank, streams, self.providers, None, False)
        self.calls: list[Call] = self.maker.calls
        self.llm_steps = [s for s in plan.workflow.steps if s.tool is None]
        self.steps = {s.id: s for s in self.llm_steps}
        self.states: dict[int, RunState] = {}

    def state(self, run: Run) -> RunState:
        """The bookkeeping of `run` (made on first use)."""
        key = id(run)
        found = self.states.get(key)
        if found is None:
            found = self.states[key] = RunState()
        return found

    def step_for(self, run: Run, named: str | None) -> Step:
        """The step a call is for: the one its header names, else the first LLM step (in the
        workflow's order) this run has no answer of yet (the last one once all have)."""
        if named is not None:
            step = self.steps.get(named)
            if step is None:
                allowed = ", ".join(self.steps)
                why = f"{STEP_HEADER}: no LLM step {named!r}; steps: {allowed}"
                raise ServiceError(400, "invalid_request_error", why)
            return step
        answers = self.state(run).answers
        for step in self.llm_steps:
            if step.id not in answers:
                return step
        return self.llm_steps[-1]

    def start(
        self,
        run: Run,
        provider: str,
        model: str,
        step: Step,
        read_timeout: float | None,
        on_served: Callable[[float, float, float, int], None] | None = None,
    ) -> tuple[Call, asyncio.Future[Call], simpy.Process]:
        """Send one call now: its record, a future set when the call ends, and its process
        (interrupt it to cancel). Its draws are the engine's for this run, step and the
        number of calls the step has made so far in this run (`CallMaker._prepare`).
        `on_served` hears its service as it starts (a stream's first token and pace)."""
        serving = self.providers.get(provider)
        if serving is None or model not in serving.serving:
            served = ", ".join(serving.serving) if serving is not None else ""
            raise ServiceError(404, "model_not_found",
                               f"provider {provider!r} does not serve model {model!r}"
                               + (f" (it serves: {served})" if served else ""))  # fmt: skip
        state = self.state(run)
        k = state.calls.get(step.id, 0)
        state.calls[step.id] = k + 1
        handle = _Handle(run, step, draw_id(step.id, 0))
        plan = Attempt(provider, model, read_timeout)
        call, ttft, generation, stall, drawn, truncated = self.maker._prepare(
            handle, serving, 0, plan, k
        )
        call.attempt, call.sdk_retry = k, 0  # the k-th call of the step: the client's count
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Call] = loop.create_future()

        def live() -> Any:
            run.calls += 1
            run.running = step.id
            me = self.env.active_process
            run.active.add(me)
            try:
                yield from serve(serving, call, ttft, generation, stall, drawn, read_timeout,
                                 on_served=on_served)  # fmt: skip
                if call.ended_by in READ_TIMEOUTS:  # a stream's read timeout, client side
                    call.outcome, call.ended_by = OUTCOME_TIMEOUT, READ_TIMEOUTS[call.ended_by]
                if truncated and call.outcome == OUTCOME_OK:
                    call.outcome = OUTCOME_TRUNCATED
            finally:
                run.active.discard(me)
                run.cost += call.cost
                run.tokens += call.billed_input + call.billed_output
                self.calls.append(call)
                if call.outcome in (OUTCOME_OK, OUTCOME_INVALID, OUTCOME_TRUNCATED):
                    state.answers[step.id] = call
                if not done.done():
                    loop.call_soon(_settle, done, call)

        process = self.env.process(live())
        return call, done, process

    def cancel(self, process: simpy.Process, run: Run, cause: str | None = None) -> None:
        """A call in flight is given up: it is cancelled now inside the simulation (its slot
        freed or its queue place left, billed per `billing.cancelled`); `cause` its `ended_by`
        (default: the deadline once it has passed, else the client)."""
        if process.is_alive:
            if cause is None:
                cause = BY_DEADLINE if self.env.now >= run.deadline_at else BY_CLIENT
            process.interrupt(cause)

    def end_run(self, run: Run, cause: str) -> None:
        """A request has ended (answered, failed or past its deadline): every call of it still
        in flight is cancelled, as the engine's end of a run cancels its calls."""
        for process in list(run.active):
            self.cancel(process, run, cause)


def _settle(done: asyncio.Future[Call], call: Call) -> None:
    if not done.done():
        done.set_result(call)
