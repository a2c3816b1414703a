"""The simulation of one policy on one scenario: arrivals, requests, steps, calls, deadline.

`simulate` builds a fresh simpy Environment and providers, replays the given arrivals, runs every
request's workflow under the policy, holds each request to its end-to-end deadline (cancelling
its in-flight calls when it passes) and returns flat records. It knows nothing of files, plots
or the CLI.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import simpy

from sim.model.backoff import retry_wait
from sim.model.conditions import difficulty_factors
from sim.model.config import Scenario, ValidatorSpec
from sim.model.hardness import Hardness, hard_tokens
from sim.model.latency import U_OUTCOME, CallDraws, CallLatency, LogNormal, build_distribution
from sim.model.provider import (
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Call,
    Environment,
    Provider,
    Serving,
)
from sim.model.rows import (
    FAIL_DEADLINE,
    FAIL_DISCONNECT,
    FAIL_NO_CALL,
    FAIL_REFUSED,
    Action,
    Records,
    Run,
)
from sim.model.streams import CallDrawBank, Streams
from sim.model.workflow import Step, Workflow
from sim.policy.actions import ToolDesk
from sim.policy.controls import FAIL_SHED, OUTCOME_BREAKER_OPEN, Controls
from sim.policy.deadlines import (
    BY_ADMISSION,
    BY_ATTEMPT,
    BY_LOSER,
    BY_RUN,
    DeadlineRules,
    admits,
    attempt_limit,
    rules_for,
)
from sim.policy.plans import Attempt, Policy

_INF = math.inf
#: Cause given to `Process.interrupt` when a call is cancelled.
CANCEL = OUTCOME_CANCELLED
#: `Run.remaining` value of a step that can no longer run (a step it needs failed).
LOST = -1
#: Cyclic-GC thresholds while a simulation runs (at least these; restored after).
GC_THRESHOLDS = (100_000, 50, 50)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the cyclic garbage collector's thresholds for the duration: a run allocates
    millions of short-lived objects while its records (kept alive on purpose) grow, so at the
    default thresholds the collector keeps re-scanning the records; finished runs are freed by
    reference counting, so collecting less often does not let memory grow."""
    old = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(old, GC_THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*old)


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
        rules: DeadlineRules | None = None,
    ) -> None:
        self.env = Environment()
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
        #: Hard requests (None: off): more junk and longer answers on every attempt of one.
        self.hardness = Hardness.of(scenario, self.latencies)
        self.runs: list[Run] = []
        self.calls: list[Call] = []
        self.actions: list[Action] = []
        #: How the deadline reaches this policy's work (propagation, reserve, admission).
        self.rules = rules if rules is not None else rules_for(scenario, policy.name)
        #: Keep each attempt's `Flight` (only a policy reading streaming progress needs them).
        self.keeps_flights = policy.watches_flights
        #: Per step index: nothing in the step itself or the rules to check per attempt (the
        #: rest of `_StepRun.plain` depends on the run).
        #: The rules' parts every step handle reads (`DeadlineRules`), looked up once.
        self.propagate, self.reserve_s = self.rules.propagate, self.rules.reserve_s
        self.caps_attempts = self.rules.caps_attempts
        self.plain_steps = [
            s.budget_s == math.inf
            and s.attempt_budget_s is None
            and s.queue_budget_s is None
            and self.rules.expected is None
            for s in self.workflow.steps
        ]
        self.tools = ToolDesk(self.env, self.bank, self.rules, self.workflow.steps, self.actions)
        disconnect = scenario.customers.disconnect
        self._disconnect_p = disconnect.probability if disconnect is not None else 0.0
        self._disconnect_after = (
            build_distribution(disconnect.after_s) if disconnect is not None else None
        )
        self.model_quality = {m: spec.quality for m, spec in scenario.models.items()}
        self.quality_floor = scenario.quality_floor
        self.lengths = {
            s.id: LogNormal.from_median_p99(s.length.median, s.length.p99)
            for s in self.workflow.steps
            if s.length is not None
        }
        #: Per step index: the answer's length is drawn or capped per call (else it is fixed).
        self.shaped_steps = [
            s.length is not None or s.max_tokens is not None for s in self.workflow.steps
        ]
        #: Per call slot (provider, model, step index, attempt, re-send, SDK retry): its draws
        #: from the bank and its prefill seconds, looked up once per slot, not once per call.
        self._slots: dict[tuple[str, str, int, int, int, int], tuple[CallDraws, float]] = {}
        retry = scenario.customers.retry
        self._resend_probability = retry.probability if retry.max > 0 else 0.0
        self._resend_uniforms: dict[int, np.ndarray] = {}
        #: The policy's load-aware controls (None: off, and the plain call path is used).
        self.controls: Controls | None = None
        if policy.controls is not None:
            self.controls = Controls(self.env, policy.controls, list(self.providers), self.workflow)

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
        with fewer_collections():
            if stop is None:
                self.env.run()
            else:
                self._run_until_stopped(stop)
        open_s = self.controls.breaker_open_s(self.env.now) if self.controls is not None else 0.0
        return Records(self.policy.name, self.runs, self.calls, open_s, self.actions)

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
        if self._disconnect_p > 0:
            self._schedule_disconnect(run)

    def _deadline_passed(self, run: Run) -> None:
        if math.isnan(run.end):  # still going (or too late to deliver): the run has failed
            self._give_up(run, FAIL_DEADLINE, run.deadline_at)

    def _schedule_disconnect(self, run: Run) -> None:
        """With `customers.disconnect`, this run's caller may hang up (named streams)."""
        assert self._disconnect_after is not None
        if self.bank.uniform(run.index, "disconnect", run.resend) >= self._disconnect_p:
            return
        u = self.bank.uniform(run.index, "disconnect-after", run.resend)
        after = float(self._disconnect_after.from_uniform(np.asarray([u]))[0])

        def hang_up(_: simpy.Event) -> None:
            if math.isnan(run.end):
                self._give_up(run, FAIL_DISCONNECT, self.env.now)

        self.env.timeout(after).callbacks.append(hang_up)

    def _give_up(self, run: Run, reason: str, end: float) -> None:
        """The edge gives up on a run (deadline, disconnect): it has failed. With propagation
        its work stops now; without, nothing below the edge knows and the work runs on."""
        run.fail_reason, run.fail_step = reason, run.running
        run.given_up_at = self.env.now
        if self.rules.propagate:
            self._finish(run, ok=False, end=end, cause=reason)
            return
        run.edge_done = True
        run.ok, run.end = False, end
        if reason == FAIL_DEADLINE and self._resend_probability > 0:
            self._maybe_resend(run)

    def _finish(self, run: Run, ok: bool, end: float, cause: str = BY_RUN) -> None:
        """End a run: nothing new starts, every call still in flight is cancelled now (`cause`
        becomes their `ended_by`). A run the edge already gave up on keeps that outcome."""
        run.closed = True
        if run.edge_done:
            for process in list(run.active):
                self._cancel(run, process, cause)
            return
        run.ok = ok
        run.end = end
        if ok:
            steps = self.workflow.steps
            run.valid = all(run.valid_steps[s.index] for s in steps if s.required)
            mean = run.quality_sum / run.answered if run.answered else 1.0
            run.quality = mean if run.valid else 0.0
            run.valid_hit = run.valid and run.quality >= self.quality_floor - 1e-12
        for process in list(run.active):
            self._cancel(run, process, cause)
        if not ok and self._resend_probability > 0 and run.fail_reason != FAIL_DISCONNECT:
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
        env, execute, controls = self.env, self.policy.execute, self.controls
        while step is not None:
            handle = _StepRun(self, run, step)
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

    # ------------------------------------------------------------------ calls

    def _call(
        self, handle: _StepRun, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """One policy attempt: a call on its provider (its answer truncated at `max_tokens` and
        passed through the step's validator), then the SDK's own retries, if any."""
        run = handle.run
        if run.closed:
            return None
        limits = _NO_LIMITS
        if not handle.plain:  # budgets, a reserve or admission: how long may this attempt run?
            limits = self._limits(handle, attempt, plan)
            if limits is None:  # refused: the time left cannot fund it
                return None
            if limits.give_up_after != plan.give_up_after:
                plan = Attempt(plan.provider, plan.model, limits.give_up_after)
        provider = self.providers[plan.provider]
        call, ttft, generation, stall, drawn, truncated = self._prepare(
            handle, provider, attempt, plan, 0
        )
        process = self.env.active_process
        run.active.add(process)
        try:
            if handle.plain:
                yield from provider.call(call, ttft, generation, stall, drawn, plan.give_up_after)
            else:
                yield from provider.call(
                    call, ttft, generation, stall, drawn, plan.give_up_after,
                    limits.queue, limits.start_by, limits.service,
                )  # fmt: skip
            if truncated or handle.step.validator is not None:
                yield from self._check_answer(handle, call, truncated)
            run.calls += 1  # as `_record`, written out on the hot path
            run.cost += call.cost
            run.tokens += call.billed_input + call.billed_output
            self.calls.append(call)
            if call.ended_by or call.outcome == OUTCOME_TIMEOUT:  # else `_label` does nothing
                self._label(handle, call, attempt, limits.by)
            if provider.sdk_retries:
                call = yield from self._sdk_retries(handle, provider, attempt, plan, call, limits)
        finally:
            run.active.discard(process)
        handle.last_outcome = call.outcome
        if call.outcome == OUTCOME_OK:
            handle.answer = call
            if math.isnan(run.end):  # the run's first useful signal: its earliest first token
                signal = call.start + call.queue + call.ttft - run.arrival
                if not signal >= run.first_signal:  # True while first_signal is NaN
                    run.first_signal = signal
        return call

    def _limits(self, handle: _StepRun, attempt: int, plan: Attempt) -> _Limits | None:
        """How long an attempt starting now may run and which budget binds, or None (counted)
        when it is refused: no time left at all, or (admission) too little to finish."""
        limit, by = handle.limit(plan.give_up_after, None)
        if limit is not None and limit <= 0:  # no time left at all: start nothing
            handle.refuse(attempt)
            return None
        if not handle.admits(0.0, attempt):  # cannot finish in the time left
            return None
        expected = self.rules.expected
        start_by = math.inf  # picked up later, it cannot finish in time: it refuses
        if expected is not None:
            start_by = min(handle.known_end, handle.step_end) - expected[handle.step.id]
        step = handle.step
        return _Limits(limit, step.queue_budget_s, start_by, by, step.attempt_budget_s)

    @staticmethod
    def _label(handle: _StepRun, call: Call, attempt: int, by: str) -> None:
        """Name the budget that cut a call, and count a call refused at pickup."""
        if call.outcome == OUTCOME_TIMEOUT and not call.ended_by:
            call.ended_by = by
        elif call.ended_by == BY_ADMISSION:
            handle.refuse(attempt, call.sdk_retry)

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
            call = yield from self._call(handle, attempt, plan)
        finally:
            controls.release(provider)
        if call is not None:
            controls.attempt_ended(call)
        return call

    def _prepare(
        self, handle: _StepRun, provider: Provider, attempt: int, plan: Attempt, sdk: int
    ) -> tuple[Call, float, float, float, int, bool]:
        """A call about to be sent and its draws (common random numbers): first token (plus
        prefill), generation (times the request's difficulty, scaled to this call's drawn
        answer length, longer on a hard request), stall, drawn outcome (a hard request's junk
        rate); and whether the answer will be truncated."""
        run, step = handle.run, handle.step
        resend = run.resend
        slot = self._slots.get((plan.provider, plan.model, step.index, attempt, resend, sdk))
        if slot is None:
            slot = self._slot(step, attempt, plan, resend, sdk)
        draws, prefill = slot
        i = run.index
        ttft, generation = draws.ttft[i], draws.generation[i]
        if self.difficulty is not None:
            ttft, generation = ttft * self.difficulty[i], generation * self.difficulty[i]
        if prefill:  # prefill grows with the prompt
            ttft += prefill
        drawn, scale = draws.outcome[i], 1.0
        hardness, bank = self.hardness, self.bank
        if hardness is not None and plan.model in hardness.effects and hardness.is_hard(bank, i):
            v = bank.uniforms(step.id, attempt, resend, sdk)[i, U_OUTCOME]
            drawn = hardness.outcome((plan.provider, plan.model), v, drawn)
            scale = hardness.length(plan.model)
        tokens = step.output_tokens
        truncated = False
        if self.shaped_steps[step.index] or scale != 1.0:
            length = self.lengths.get(step.id)
            if length is not None:  # this call's answer length; generation time scales with it
                u = self.bank.length_uniforms(step.id, attempt, resend)[i]
                tokens = hard_tokens(float(length.from_uniform(np.asarray([u]))[0]), scale)
                generation *= tokens / step.output_tokens
            elif scale != 1.0:  # a hard request's longer answer
                tokens = hard_tokens(step.output_tokens, scale)
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
            call.spell_u = self.bank.uniform(i, "spell", step.id, attempt, resend, sdk)
        stall = draws.stall[i]
        if self.keeps_flights:
            handle.flights[attempt] = Flight(call, ttft, generation, stall)
        return call, ttft, generation, stall, drawn, truncated

    def _slot(
        self, step: Step, attempt: int, plan: Attempt, resend: int, sdk: int
    ) -> tuple[CallDraws, float]:
        """Look up a call slot's draws in the bank (and its prefill seconds) and keep them."""
        path = (plan.provider, plan.model)
        latency = self.latencies[path]
        draws = self.bank.draws(step.id, attempt, resend, path, latency, step.output_tokens, sdk)
        prefill = latency.ttft_s_per_ktok * step.input_tokens / 1000
        slot = (draws, prefill if latency.ttft_s_per_ktok > 0 else 0.0)
        self._slots[(plan.provider, plan.model, step.index, attempt, resend, sdk)] = slot
        return slot

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
        self,
        handle: _StepRun,
        provider: Provider,
        attempt: int,
        plan: Attempt,
        call: Call,
        limits: _Limits,
    ) -> Generator[simpy.Event, Any, Call]:
        """The SDK's hidden retries inside one policy attempt: after a 429 or a hard error it
        waits (Retry-After up to its cap, else its backoff) and calls again, up to
        `sdk.retries` times. It gives up early when the wait would pass the policy's cut or the
        deadline, or when the attempt is cancelled while it waits; with admission, also when
        the time left cannot fund the wait and an attempt (counted as a refused retry)."""
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
            if not handle.admits(wait, attempt, j):
                break
            if wait > 0:
                try:
                    yield env.timeout(wait)
                except simpy.Interrupt:  # cancelled while the SDK slept
                    break
            if run.closed:
                break
            call, ttft, generation, stall, drawn, truncated = self._prepare(
                handle, provider, attempt, plan, j
            )
            try:
                if handle.plain:
                    yield from provider.call(call, ttft, generation, stall, drawn, left)
                else:
                    yield from provider.call(
                        call, ttft, generation, stall, drawn, left,
                        limits.queue, limits.start_by, limits.service,
                    )  # fmt: skip
                if truncated or handle.step.validator is not None:
                    yield from self._check_answer(handle, call, truncated)
            finally:
                self._record(run, call)
            self._label(handle, call, attempt, limits.by)
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
            except simpy.Interrupt as stop:
                call.outcome, call.ended_by = OUTCOME_CANCELLED, str(stop.cause)
                call.end = self.env.now
                return
            call.end = self.env.now
        if call.outcome != OUTCOME_INVALID:
            return
        # where this call's outcome uniform fell inside the invalid band: uniform on [0, 1),
        # independent of everything else, and common to every policy
        block = self.bank.uniforms(call.step, attempt, run.resend, call.sdk_retry)
        v = float(block[run.index, U_OUTCOME])
        band = latency.invalid_rate  # the invalid band's width (a hard request's junk rate)
        if self.hardness is not None:
            band = self.hardness.junk_rate((call.provider, call.model), self.bank, run.index, band)
        w = (v - latency.error_rate) / band if band > 0 else 0.0
        if not w < validator.catches:
            call.outcome, call.valid = OUTCOME_OK, False

    @staticmethod
    def _cancel(run: Run, process: simpy.Process, cause: str = CANCEL) -> None:
        if process in run.active and process.is_alive:
            run.active.discard(process)
            process.interrupt(cause)


@dataclass(frozen=True, slots=True)
class _Limits:
    """An attempt's limits when a budget, a reserve or admission is set (see `Provider.call`):
    its cut, its queue budget, the latest pickup that can still finish, the budget that binds
    the cut (its `ended_by`), and its service budget from the slot grant."""

    give_up_after: float | None = None
    queue: float | None = None
    start_by: float = math.inf
    by: str = BY_ATTEMPT
    service: float | None = None


#: The limits of an attempt on the fast path (no budget, reserve or admission).
_NO_LIMITS = _Limits()
#: The (read-only, always empty) flights of a step whose policy does not read them.
_NO_FLIGHTS: MappingProxyType[int, Flight] = MappingProxyType({})


class _StepRun:
    """The engine's handle for a policy running one step of one run."""

    __slots__ = ("answer", "env", "flights", "known_end", "last_outcome", "plain", "run", "sim",
                 "step", "step_end", "work_end")  # fmt: skip

    def __init__(self, sim: Simulation, run: Run, step: Step) -> None:
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
        #: this is fixed per simulation, in `Simulation.plain_steps`).
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
        Simulation._cancel(self.run, process, BY_LOSER)

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
