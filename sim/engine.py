"""The simulation of one policy on one scenario: arrivals, requests, steps, calls, deadline.

`simulate` builds a fresh simpy Environment and providers, replays the given arrivals, runs every
request's workflow under the policy, holds each request to its end-to-end deadline (cancelling
its in-flight calls when it passes) and returns flat records. It knows nothing of files, plots
or the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.backoff import retry_wait
from sim.conditions import difficulty_factors
from sim.config import Scenario, ValidatorSpec
from sim.controls import FAIL_SHED, OUTCOME_BREAKER_OPEN, Controls
from sim.latency import U_OUTCOME, CallLatency, LogNormal
from sim.policies import Attempt, Policy
from sim.provider import (
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TRUNCATED,
    Call,
    Provider,
    Serving,
)
from sim.streams import CallDrawBank, Streams
from sim.workflow import Step, Workflow

#: Cause given to `Process.interrupt` when a call is cancelled.
CANCEL = OUTCOME_CANCELLED
#: `Run.remaining` value of a step that can no longer run (a step it needs failed).
LOST = -1
#: `fail_reason` of a run still going at its deadline.
FAIL_DEADLINE = "deadline"
#: `fail_reason` of a step that failed without making a call (its request closed first).
FAIL_NO_CALL = "no_call"


class Run:
    """One send of one customer request through the workflow (re-sends are new runs)."""

    __slots__ = (
        "active",
        "answered",
        "arrival",
        "calls",
        "closed",
        "cost",
        "deadline_at",
        "drafts_kept",
        "drafts_upgraded",
        "end",
        "fail_reason",
        "fail_step",
        "failed",
        "index",
        "ok",
        "quality",
        "quality_sum",
        "remaining",
        "resend",
        "running",
        "tokens",
        "unresolved",
        "valid",
        "valid_hit",
        "valid_steps",
    )

    def __init__(
        self, env: simpy.Environment, workflow: Workflow, index: int, resend: int, deadline_s: float
    ) -> None:
        self.index = index
        self.resend = resend
        self.arrival = env.now
        self.deadline_at = env.now + deadline_s
        self.closed = False
        self.ok = False
        self.failed = False
        self.end = math.nan
        self.fail_reason = ""  # deadline, or the outcome of the failing step's last call
        self.fail_step = ""  # the step that failed the run (at the deadline: one still running)
        self.running = ""  # the step started last (what the deadline interrupts)
        self.cost = 0.0
        self.tokens = 0
        self.calls = 0
        self.active: set[simpy.Process] = set()
        self.remaining = [len(s.depends_on) for s in workflow.steps]
        self.unresolved = len(workflow.steps)
        # answers: is each step's answer valid (its own and everything it was built on)
        self.valid_steps = [True] * len(workflow.steps)
        self.answered = 0  # steps with an accepted answer
        self.quality_sum = 0.0  # sum of the answering models' quality
        self.valid = False  # set at the end: every required answer valid
        self.quality = math.nan  # set at the end of a delivered run
        self.valid_hit = False  # on time, every required answer valid, quality >= the floor
        self.drafts_kept = 0
        self.drafts_upgraded = 0


@dataclass
class Records:
    """What one simulation produced: every run and every call, as objects (tables come later)."""

    policy: str
    runs: list[Run]
    calls: list[Call]
    #: Seconds any provider's breaker was open (0 without a breaker).
    breaker_open_s: float = 0.0


class Simulation:
    """One policy on one scenario, in its own simpy Environment."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        bank: CallDrawBank,
        streams: Streams,
        deadline_s: float | None = None,
        latencies: dict[tuple[str, str], CallLatency] | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.scenario = scenario
        self.policy = policy
        self.bank = bank
        self.streams = streams
        self.deadline_s = scenario.deadline_s if deadline_s is None else deadline_s
        self.workflow = Workflow.from_scenario(scenario)
        self.latencies = latencies or serving_latencies(scenario)
        self.providers = {
            name: Provider(
                self.env,
                name,
                spec,
                {
                    model: Serving(
                        self.latencies[(name, model)],
                        scenario.models[model].price_per_mtok.input / 1e6,
                        scenario.models[model].price_per_mtok.output / 1e6,
                    )
                    for model in spec.serves
                },
                scenario.billing.cancelled,
                streams.generator("episodes", name) if spec.episodes is not None else None,
            )
            for name, spec in scenario.providers.items()
        }
        #: Per-request difficulty factors (None: off), one stream for every policy.
        self.difficulty = None
        if scenario.difficulty is not None:
            rng = streams.generator("difficulty")
            self.difficulty = difficulty_factors(scenario.difficulty, rng, bank.n_requests)
        self.runs: list[Run] = []
        self.calls: list[Call] = []
        self.model_quality = {m: spec.quality for m, spec in scenario.models.items()}
        self.quality_floor = scenario.quality_floor
        self.lengths = {
            s.id: LogNormal.from_median_p99(s.length.median, s.length.p99)
            for s in self.workflow.steps
            if s.length is not None
        }
        retry = scenario.customers.retry
        self._resend_probability = retry.probability if retry.max > 0 else 0.0
        self._resend_uniforms: dict[int, np.ndarray] = {}
        #: The policy's load-aware controls (None: off, and the plain call path is used).
        self.controls: Controls | None = None
        if policy.controls is not None:
            self.controls = Controls(self.env, policy.controls, list(self.providers), self.workflow)
            self._call = self._controlled_call  # type: ignore[method-assign]

    # ------------------------------------------------------------------ driving

    def run(
        self,
        arrivals: np.ndarray,
        progress: Callable[[int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Records:
        """Replay `arrivals` (seconds) to the end and return the records.

        `stop` is asked every few thousand events; when it says yes the run ends with
        KeyboardInterrupt between two events, never inside simpy's own bookkeeping."""
        self.env.process(self._arrivals(arrivals, progress))
        if stop is None:
            self.env.run()
        else:
            self._run_until_stopped(stop)
        open_s = self.controls.breaker_open_s(self.env.now) if self.controls is not None else 0.0
        return Records(self.policy.name, self.runs, self.calls, open_s)

    def _run_until_stopped(self, stop: Callable[[], bool], every: int = 4096) -> None:
        step = self.env.step
        try:
            while True:
                for _ in range(every):
                    step()
                if stop():
                    raise KeyboardInterrupt
        except simpy.core.EmptySchedule:
            return

    def _arrivals(
        self, times: np.ndarray, progress: Callable[[int], None] | None
    ) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for index, at in enumerate(times.tolist()):
            if at > env.now:
                yield env.timeout(at - env.now)
            self._start_run(index, 0)
            if progress is not None and index % 1000 == 999:
                progress(1000)
        if progress is not None and len(times) % 1000:
            progress(len(times) % 1000)

    def _start_run(self, index: int, resend: int) -> None:
        """A run arrives: its root steps start, and its deadline is set (a plain timer)."""
        env = self.env
        run = Run(env, self.workflow, index, resend, self.deadline_s)
        self.runs.append(run)
        if self.controls is not None and not self.controls.admits_run(self.deadline_s):
            run.fail_reason = FAIL_SHED  # shed at arrival: expected past its deadline
            self._finish(run, ok=False, end=env.now)
            return
        for step in self.workflow.roots:
            env.process(self._step(run, step))
        if math.isfinite(self.deadline_s):
            env.timeout(self.deadline_s).callbacks.append(lambda _: self._deadline_passed(run))

    def _deadline_passed(self, run: Run) -> None:
        if not run.closed:  # still going: the run has failed, stop its work
            run.fail_reason, run.fail_step = FAIL_DEADLINE, run.running
            self._finish(run, ok=False, end=run.deadline_at)

    def _finish(self, run: Run, ok: bool, end: float) -> None:
        """End a run: nothing new starts, every call still in flight is cancelled now."""
        run.closed = True
        run.ok = ok
        run.end = end
        if ok:
            steps = self.workflow.steps
            run.valid = all(run.valid_steps[s.index] for s in steps if s.required)
            mean = run.quality_sum / run.answered if run.answered else 1.0
            run.quality = mean if run.valid else 0.0
            run.valid_hit = run.valid and run.quality >= self.quality_floor - 1e-12
        for process in list(run.active):
            self._cancel(run, process)
        if not ok and self._resend_probability > 0:
            self._maybe_resend(run)

    def _maybe_resend(self, run: Run) -> None:
        """A customer re-sends a failed request whole, after a delay, with some probability."""
        retry = self.scenario.customers.retry
        if run.resend >= retry.max:
            return
        u = self._resend_uniforms.get(run.resend)
        if u is None:
            rng = self.streams.generator("customer-resend", run.resend)
            u = rng.random(self.bank.n_requests)
            self._resend_uniforms[run.resend] = u
        if u[run.index] < retry.probability:
            index, resend = run.index, run.resend + 1
            delay = retry.delay_s
            if retry.backoff is not None:
                jitter = self.bank.uniform(index, "customer-backoff", resend)
                delay = retry_wait(retry.backoff, resend, jitter)
            self.env.timeout(delay).callbacks.append(lambda _: self._start_run(index, resend))

    # ------------------------------------------------------------------ steps

    def _step(self, run: Run, step: Step | None) -> Generator[simpy.Event, Any, None]:
        """Run a step, then go on with the first step it unlocks (others get processes of their
        own): a chain costs one process, a DAG one per branch."""
        env = self.env
        while step is not None:
            handle = _StepRun(self, run, step)
            run.running = step.id
            began = env.now
            ok = yield from self.policy.execute(handle)
            if ok and not run.closed:
                self._answered(run, step, handle.answer)
            if self.controls is not None:
                self.controls.step_ended(step.index, env.now - began, ok, self.deadline_s)
            ready = self._resolve(run, step, ok, handle.last_outcome or FAIL_NO_CALL)
            step = ready[0] if ready else None
            for other in ready[1:]:
                self.env.process(self._step(run, other))

    def _answered(self, run: Run, step: Step, answer: Call | None) -> None:
        """Record the answer a step delivered: its model's quality, and whether it is valid
        (an invalid answer, or one built on an invalid one, breaks quality, not latency)."""
        if answer is None:
            return
        run.answered += 1
        run.quality_sum += self.model_quality[answer.model]
        valid = answer.valid and all(run.valid_steps[d] for d in step.depends_on)
        run.valid_steps[step.index] = valid

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
            self._finish(run, ok=not run.failed, end=self.env.now)
            return []
        return ready

    # ------------------------------------------------------------------ calls

    def _call(
        self, handle: _StepRun, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """One policy attempt: a call on its provider (its answer truncated at `max_tokens` and
        passed through the step's validator), then the SDK's own retries, if any."""
        run = handle.run
        if run.closed:
            return None
        provider = self.providers[plan.provider]
        call, args, truncated = self._prepare(handle, provider, attempt, plan, 0)
        process = self.env.active_process
        run.active.add(process)
        try:
            yield from provider.call(call, *args, plan.give_up_after)
            if truncated or handle.step.validator is not None:
                yield from self._check_answer(handle, call, truncated)
            run.calls += 1  # as `_record`, written out on the hot path
            run.cost += call.cost
            run.tokens += call.billed_input + call.billed_output
            self.calls.append(call)
            if provider.sdk_retries:
                call = yield from self._sdk_retries(handle, provider, attempt, plan, call)
        finally:
            run.active.discard(process)
        handle.last_outcome = call.outcome
        if call.outcome == OUTCOME_OK:
            handle.answer = call
        return call

    def _controlled_call(
        self, handle: _StepRun, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """`_call` under load-aware controls: refused while the provider's breaker is open (no
        call is made), queued at the client under an AIMD limit, and learnt from."""
        controls = self.controls
        assert controls is not None
        run, provider = handle.run, plan.provider
        if run.closed:
            return None
        if controls.refuses(provider):
            step = handle.step
            call = Call(
                run, step.id, attempt, provider, plan.model, self.env.now,
                step.input_tokens, step.output_tokens, queue=0.0, end=self.env.now,
                outcome=OUTCOME_BREAKER_OPEN,
            )  # fmt: skip
            handle.last_outcome = call.outcome
            return call
        gate = controls.acquire(provider)
        if gate is not None:  # over the AIMD limit: wait at the client (cancellable)
            process = self.env.active_process
            run.active.add(process)
            try:
                yield gate
            except simpy.Interrupt:
                controls.abandon(provider, gate)
                return None
            finally:
                run.active.discard(process)
            if run.closed:
                controls.release(provider)
                return None
        if attempt == 0:
            controls.primary_sent()
        try:
            call = yield from Simulation._call(self, handle, attempt, plan)
        finally:
            controls.release(provider)
        if call is not None:
            controls.attempt_ended(call)
        return call

    def _prepare(
        self, handle: _StepRun, provider: Provider, attempt: int, plan: Attempt, sdk: int
    ) -> tuple[Call, tuple[float, float, float, int], bool]:
        """A call about to be sent and its draws (common random numbers): first token (plus
        prefill), generation (times the request's difficulty, scaled to this call's drawn
        answer length), stall, drawn outcome; and whether the answer will be truncated."""
        run, step = handle.run, handle.step
        latency = self.latencies[(plan.provider, plan.model)]
        path = (plan.provider, plan.model)
        draws = (
            self.bank.draws(step.id, attempt, run.resend, path, latency, step.output_tokens)
            if sdk == 0
            else self.bank.draws(
                step.id, attempt, run.resend, path, latency, step.output_tokens, sdk
            )
        )
        i = run.index
        ttft, generation, tokens = draws.ttft[i], draws.generation[i], step.output_tokens
        if self.difficulty is not None:
            ttft, generation = ttft * self.difficulty[i], generation * self.difficulty[i]
        if latency.ttft_s_per_ktok > 0:  # prefill grows with the prompt
            ttft += latency.ttft_s_per_ktok * step.input_tokens / 1000
        length = self.lengths.get(step.id)
        if length is not None:  # this call's answer length; generation time scales with it
            u = self.bank.length_uniforms(step.id, attempt, run.resend)[i]
            tokens = max(1, round(float(length.from_uniform(np.asarray([u]))[0])))
            generation *= tokens / step.output_tokens
        truncated = step.max_tokens is not None and tokens > step.max_tokens
        if truncated:
            generation *= step.max_tokens / tokens  # type: ignore[operator]
            tokens = step.max_tokens  # type: ignore[assignment]
        call = Call(
            run,
            step.id,
            attempt,
            plan.provider,
            plan.model,
            self.env.now,
            step.input_tokens,
            tokens,
            reserved=step.reserved_output,
        )
        if sdk:
            call.sdk_retry = sdk
        if provider.spell_error_rate > 0:
            call.spell_u = self.bank.uniform(i, "spell", step.id, attempt, run.resend, sdk)
        handle.flights[attempt] = Flight(call, ttft, generation, draws.stall[i])
        return call, (ttft, generation, draws.stall[i], draws.outcome[i]), truncated

    def _check_answer(
        self, handle: _StepRun, call: Call, truncated: bool
    ) -> Generator[simpy.Event, Any, None]:
        """A delivered answer cut at `max_tokens` is truncated (invalid, caught for free); an
        answer (valid or junk) then goes through the step's validator, if it has one."""
        if truncated and call.outcome == OUTCOME_OK:
            call.outcome = OUTCOME_TRUNCATED
        validator = handle.step.validator
        if validator is not None and call.outcome in (OUTCOME_OK, OUTCOME_INVALID):
            latency = self.latencies[(call.provider, call.model)]
            yield from self._validate(handle.run, call, validator, latency, call.attempt)

    def _record(self, run: Run, call: Call) -> None:
        """Add an ended call to its run's totals and to the records."""
        run.calls += 1
        run.cost += call.cost
        run.tokens += call.billed_input + call.billed_output
        self.calls.append(call)

    def _sdk_retries(
        self, handle: _StepRun, provider: Provider, attempt: int, plan: Attempt, call: Call
    ) -> Generator[simpy.Event, Any, Call]:
        """The SDK's hidden retries inside one policy attempt: after a 429 or a hard error it
        waits (Retry-After up to its cap, else its backoff) and calls again, up to
        `sdk.retries` times. It gives up early when the wait would pass the policy's cut or the
        deadline, or when the attempt is cancelled while it waits."""
        run, env = handle.run, self.env
        backoff = provider.sdk.backoff
        began = call.start
        for j in range(1, provider.sdk_retries + 1):
            if run.closed or call.outcome not in (OUTCOME_RATE_LIMITED, OUTCOME_ERROR):
                break
            u = self.bank.uniform(run.index, "sdk-backoff", handle.step.id, attempt, run.resend, j)
            wait = retry_wait(backoff, j, u, call.retry_after)
            left = None
            if plan.give_up_after is not None:
                left = plan.give_up_after - (env.now - began) - wait
                if left <= 0:
                    break  # the policy's cut comes first: the attempt ends with this failure
            if wait >= handle.time_left:
                break
            if wait > 0:
                try:
                    yield env.timeout(wait)
                except simpy.Interrupt:  # cancelled while the SDK slept
                    break
            if run.closed:
                break
            call, args, truncated = self._prepare(handle, provider, attempt, plan, j)
            try:
                yield from provider.call(call, *args, left)
                if truncated or handle.step.validator is not None:
                    yield from self._check_answer(handle, call, truncated)
            finally:
                self._record(run, call)
        return call

    def _validate(
        self, run: Run, call: Call, validator: ValidatorSpec, latency: CallLatency, attempt: int
    ) -> Generator[simpy.Event, Any, None]:
        """The step's validator checks an answer: it takes `latency_s`, costs `cost`, and
        rejects an invalid answer with probability `catches` (the rest pass as if valid)."""
        call.cost += validator.cost
        if validator.latency_s > 0:
            try:
                yield self.env.timeout(validator.latency_s)
            except simpy.Interrupt:
                call.outcome = OUTCOME_CANCELLED
                call.end = self.env.now
                return
            call.end = self.env.now
        if call.outcome != OUTCOME_INVALID:
            return
        # where this call's outcome uniform fell inside the invalid band: uniform on [0, 1),
        # independent of everything else, and common to every policy
        block = self.bank.uniforms(call.step, attempt, run.resend, call.sdk_retry)
        v = float(block[run.index, U_OUTCOME])
        w = (v - latency.error_rate) / latency.invalid_rate if latency.invalid_rate > 0 else 0.0
        if not w < validator.catches:
            call.outcome, call.valid = OUTCOME_OK, False

    @staticmethod
    def _cancel(run: Run, process: simpy.Process) -> None:
        if process in run.active and process.is_alive:
            run.active.discard(process)
            process.interrupt(CANCEL)


class _StepRun:
    """The engine's handle for a policy running one step of one run."""

    __slots__ = ("answer", "env", "flights", "last_outcome", "run", "sim", "step")

    def __init__(self, sim: Simulation, run: Run, step: Step) -> None:
        self.sim = sim
        self.env = sim.env
        self.run = run
        self.step = step
        self.last_outcome = ""  # outcome of this step's call that ended last
        self.answer: Call | None = None  # the answer the step delivers (last ok by default)
        self.flights: dict[int, Flight] = {}  # every attempt's call and its drawn times

    @property
    def closed(self) -> bool:
        return self.run.closed

    @property
    def time_left(self) -> float:
        """Seconds until the request's deadline."""
        return self.run.deadline_at - self.env.now

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        return self.sim._call(self, attempt, plan)

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        return self.env.process(self.sim._call(self, attempt, plan))

    def cancel(self, process: simpy.Process) -> None:
        Simulation._cancel(self.run, process)

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


def serving_latencies(scenario: Scenario) -> dict[tuple[str, str], CallLatency]:
    """The latency law of every (provider, model) serving path."""
    return {
        (pname, mname): CallLatency.from_spec(serving)
        for pname, provider in scenario.providers.items()
        for mname, serving in provider.serves.items()
    }
