"""A call's life in the event engine, in one place: from a policy's attempt to a recorded `Call`.

`CallMaker` makes one policy attempt: the load-aware controls' gate (a breaker's refusal, an
AIMD queue), the limits its step's budgets give it (`StepHandle.attempt_limits`; only off the
fast path), its draws from the bank (common random numbers: first token, generation, stall,
outcome; the request's difficulty, a hard request's junk and longer answer, the answer's length
cut at `max_tokens`; a stall's place and a mid-stream break from their own streams), the call on
its provider (`sim.engine.event_serve.serve`: quota admission or a 429 with its Retry-After, the
queue for a slot, service stretched by load and bad spells, its stream, the cut, an interrupt's
cancellation, client overhead, the bill), the answer's check (truncation, the
step's validator), its record and the label of what cut it, and the SDK's hidden retries. What
every call on a provider shares (slots, quotas, client rules) is `sim.engine.provider.Provider`,
apart only because with it this module would pass the 600-line limit. This is the engine's hot
path: `attempt`, `_prepare` and `serve` write a few steps out inline on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import numpy as np
import simpy

from sim.engine.event_serve import serve
from sim.engine.event_steps import NO_LIMITS, AttemptLimits, Flight, StepHandle
from sim.engine.kernel import Environment
from sim.engine.provider import Provider
from sim.model.backoff import sdk_wait
from sim.model.conditions import difficulty_factors
from sim.model.config import ValidatorSpec
from sim.model.flow import draw_id
from sim.model.hardness import hard_tokens
from sim.model.latency import (
    BROKEN,
    OK,
    U_OUTCOME,
    CallDraws,
    CallLatency,
    LogNormal,
)
from sim.model.rows import (
    OUTCOME_BROKEN,
    OUTCOME_CANCELLED,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Call,
    Run,
)
from sim.model.stream import BREAK, BREAK_AT, ONSET, PLACE
from sim.model.streams import CallDrawBank, Streams
from sim.model.workflow import Step
from sim.plan import Plan
from sim.policy.controls import OUTCOME_BREAKER_OPEN, Controls
from sim.policy.deadlines import BY_ADMISSION, BY_SDK, BY_TTFT
from sim.policy.plans import Attempt

__all__ = ["CallMaker", "serve"]  # serve: a call on its provider (`sim.engine.event_serve`)


class CallMaker:
    """Every call of one simulation: made, lived, checked, retried by the SDK and recorded."""

    def __init__(
        self,
        env: Environment,
        plan: Plan,
        bank: CallDrawBank,
        streams: Streams,
        providers: dict[str, Provider],
        controls: Controls | None,
        keeps_flights: bool,
    ) -> None:
        self.env = env
        self.bank = bank
        self.latencies = plan.latencies
        self.providers = providers
        self.controls = controls
        #: Keep each attempt's `Flight` (only a policy reading streaming progress needs them).
        self.keeps_flights = keeps_flights
        #: Every ended call, in the order they ended (the records).
        self.calls: list[Call] = []
        #: Per-request difficulty factors (None: off), one stream for every policy.
        self.difficulty: list[float] | None = None
        if plan.difficulty is not None:
            rng = streams.generator("difficulty")
            self.difficulty = difficulty_factors(plan.difficulty, rng, bank.n_requests)
        #: Hard requests (None: off): more junk and longer answers on every attempt of one.
        self.hardness = plan.hardness
        steps = plan.workflow.steps
        self.lengths = {
            s.id: LogNormal.from_median_p99(s.length.median, s.length.p99)
            for s in steps
            if s.length is not None
        }
        #: Per step index: the answer's length is drawn or capped per call (else it is fixed).
        self.shaped_steps = [s.length is not None or s.max_tokens is not None for s in steps]
        #: Per call slot (provider, model, draw key, attempt, re-send, SDK retry): its draws
        #: from the bank, its prefill seconds and whether its draws are used as drawn (see
        #: `_slot`), looked up once per slot, not once per call.
        self._slots: dict[tuple[str, str, str, int, int, int], tuple[CallDraws, float, bool]] = {}

    def attempt(
        self, handle: StepHandle, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """One policy attempt: a call on its provider (its answer truncated at `max_tokens` and
        passed through the step's validator), then the SDK's own retries, if any."""
        run = handle.run
        if run.closed or handle.stopped:
            return None
        limits = NO_LIMITS
        if not handle.plain:  # budgets, a reserve or admission: how long may this attempt run?
            limits = handle.attempt_limits(attempt, plan)
            if limits is None:  # refused: the time left cannot fund it
                return None
            if limits.give_up_after != plan.give_up_after:
                plan = replace(plan, give_up_after=limits.give_up_after)
        provider = self.providers[plan.provider]
        received = handle.received if plan.resume else 0  # 0 unless resuming a cut stream
        call, ttft, generation, stall, drawn, truncated = self._prepare(
            handle, provider, attempt, plan, 0, received
        )
        process = self.env.active_process
        run.active.add(process)
        tracked = handle.tracked  # a map copy's attempts, to cancel it alone (else None)
        if tracked is not None:
            tracked.add(process)
        cut, first, idle = plan.give_up_after, plan.first_token_after, plan.idle_after
        sdk_label = None
        if provider.sdk_times:  # the client's own timeout (off the fast path)
            cut, sdk_label, first, idle = client_cuts(provider, handle.step.stream, plan, cut)
        try:
            if handle.plain and first is None and idle is None:
                yield from serve(provider, call, ttft, generation, stall, drawn, cut)
            else:
                yield from serve(
                    provider, call, ttft, generation, stall, drawn, cut,
                    limits.queue, limits.start_by, limits.service, first, idle,
                )  # fmt: skip
            if (
                sdk_label is not None
                and call.ended_by == sdk_label
                and call.outcome == OUTCOME_TIMEOUT
            ):
                call.ended_by = BY_SDK
            if truncated or handle.step.validator is not None:
                yield from self._check_answer(handle, call, truncated)
            run.calls += 1  # its record: the run's totals, and the calls
            run.cost += call.cost
            run.tokens += call.billed_input + call.billed_output
            self.calls.append(call)
            if call.ended_by or call.outcome == OUTCOME_TIMEOUT:  # else `_label` does nothing
                self._label(handle, call, attempt, limits.by)
            if provider.sdk_retries:
                call = yield from self._sdk_retries(handle, provider, attempt, plan, call, limits)
        finally:
            run.active.discard(process)
            if tracked is not None:
                tracked.discard(process)
        if plan.resume:
            _keep_received(handle, call)
        handle.last_outcome = call.outcome
        if call.outcome == OUTCOME_OK:
            handle.answer = call
            if math.isnan(run.end):  # the run's first useful signal: its earliest first token
                signal = call.start + call.queue + call.ttft - run.arrival
                if not signal >= run.first_signal:  # True while first_signal is NaN
                    run.first_signal = signal
        return call

    def controlled(
        self, handle: StepHandle, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """`attempt` under load-aware controls: refused while the provider's breaker is open (no
        call is made), queued at the client under an AIMD limit, and learnt from."""
        controls = self.controls
        assert controls is not None
        run, provider = handle.run, plan.provider
        if run.closed or handle.stopped:
            return None
        if controls.refuses(provider):
            step = handle.step
            call = Call(
                run, step.id, attempt, provider, plan.model, self.env.now,
                step.input_tokens, step.output_tokens, queue=0.0, end=self.env.now,
                outcome=OUTCOME_BREAKER_OPEN,
            )  # fmt: skip
            call.iteration = handle.iteration
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
            call = yield from self.attempt(handle, attempt, plan)
        finally:
            controls.release(provider)
        if call is not None:
            controls.attempt_ended(call)
        return call

    @staticmethod
    def _label(handle: StepHandle, call: Call, attempt: int, by: str) -> None:
        """Name the budget that cut a call, and count a call refused at pickup."""
        if call.outcome == OUTCOME_TIMEOUT and not call.ended_by:
            call.ended_by = by
        elif call.ended_by == BY_ADMISSION:
            handle.refuse(attempt, call.sdk_retry)

    def _prepare(
        self,
        handle: StepHandle,
        provider: Provider,
        attempt: int,
        plan: Attempt,
        sdk: int,
        received: int = 0,
    ) -> tuple[Call, float, float, float, int, bool]:
        """A call about to be sent and its draws (common random numbers): first token (plus
        prefill), generation (times the request's difficulty, scaled to this call's drawn
        answer length, longer on a hard request), stall, drawn outcome (a hard request's junk
        rate); and whether the answer will be truncated.

        `received` > 0 (a resumed call, `resume`): the answer's first `received` tokens go with
        the prompt as prefill and only the rest is asked for. Its input is the step's plus
        `received`, its output the rest (at least 1 token), its generation time scaled to the
        rest; its first token is a new prefill, drawn as usual, plus the provider's
        `ttft_s_per_ktok` on the whole larger input (without that key the first-token time
        does not depend on input size in this model). Its other draws are its slot's own."""
        run, step, sid = handle.run, handle.step, handle.draw_id
        resend = run.resend
        slot = self._slots.get((plan.provider, plan.model, sid, attempt, resend, sdk))
        if slot is None:
            slot = self._slot(step, sid, attempt, plan, resend, sdk)
        draws, prefill, as_drawn = slot
        i = run.index
        if as_drawn and not received:  # nothing reshapes this slot's draws: the common case
            ttft = draws.ttft[i]
            if prefill:
                ttft += prefill
            call = Call(
                run, step.id, attempt, plan.provider, plan.model, self.env.now,
                step.input_tokens, step.output_tokens,
            )  # fmt: skip
            call.reserved = step.reserved_output  # (a keyword costs more than this assignment)
            if sdk:
                call.sdk_retry = sdk
            if handle.iteration:
                call.iteration = handle.iteration
            stall = draws.stall[i]
            if stall:  # a mid-stream stall: its onset, from a stream of its own
                call.onset = self.bank.uniform(i, ONSET, sid, attempt, resend, sdk)
            return call, ttft, draws.generation[i], stall, draws.outcome[i], False
        ttft, generation = draws.ttft[i], draws.generation[i]
        if self.difficulty is not None:
            ttft, generation = ttft * self.difficulty[i], generation * self.difficulty[i]
        latency = self.latencies[(plan.provider, plan.model)]
        if received:  # the slot's prefill is for the step's input: this one is larger
            prefill = latency.ttft_s_per_ktok * (step.input_tokens + received) / 1000
        if prefill:  # prefill grows with the prompt
            ttft += prefill
        drawn, scale = draws.outcome[i], 1.0
        hardness, bank = self.hardness, self.bank
        if hardness is not None and plan.model in hardness.effects and hardness.is_hard(bank, i):
            v = bank.uniforms(sid, attempt, resend, sdk)[i, U_OUTCOME]
            drawn = hardness.outcome((plan.provider, plan.model), v, drawn)
            scale = hardness.length(plan.model)
        tokens = step.output_tokens
        truncated = False
        if self.shaped_steps[step.index] or scale != 1.0:
            length = self.lengths.get(step.id)
            if length is not None:  # this call's answer length; generation time scales with it
                u = self.bank.length_uniforms(sid, attempt, resend)[i]
                tokens = hard_tokens(float(length.from_uniform(np.asarray([u]))[0]), scale)
                generation *= tokens / step.output_tokens
            elif scale != 1.0:  # a hard request's longer answer
                tokens = hard_tokens(step.output_tokens, scale)
                generation *= tokens / step.output_tokens
            truncated = step.max_tokens is not None and tokens > step.max_tokens
            if truncated:
                generation *= step.max_tokens / tokens  # type: ignore[operator]
                tokens = step.max_tokens  # type: ignore[assignment]
        input_tokens = step.input_tokens
        if received:  # resumed: the received text as prefill, only the rest asked for
            input_tokens += received
            rest = max(1, tokens - received)
            generation *= rest / tokens
            tokens = rest
        call = Call(
            run, step.id, attempt, plan.provider, plan.model, self.env.now,
            input_tokens, tokens, reserved=step.reserved_output,
        )  # fmt: skip
        if sdk:
            call.sdk_retry = sdk
        if handle.iteration:
            call.iteration = handle.iteration
        overhead = provider.overhead
        if overhead is not None:  # client overhead: its own stream per call slot
            u = self.bank.uniform(i, "overhead", sid, attempt, resend, sdk)
            call.overhead = float(overhead.from_uniform(np.asarray([u]))[0])
        if provider.spell_error_rate > 0:
            call.spell_u = self.bank.uniform(i, "spell", sid, attempt, resend, sdk)
        stall = draws.stall[i]
        if stall:  # its place: before the first token (delays it) or mid-stream (an onset)
            if latency.stall_before > 0 and (
                latency.stall_before >= 1
                or bank.uniform(i, PLACE, sid, attempt, resend, sdk) < latency.stall_before
            ):
                ttft, stall = ttft + stall, 0.0
            else:
                call.onset = bank.uniform(i, ONSET, sid, attempt, resend, sdk)
        if (  # the stream breaks after a share of it
            latency.break_rate > 0
            and drawn == OK
            and bank.uniform(i, BREAK, sid, attempt, resend, sdk) < latency.break_rate
        ):
            drawn = BROKEN
            call.broken_at = bank.uniform(i, BREAK_AT, sid, attempt, resend, sdk)
        if self.keeps_flights:
            handle.flights[attempt] = Flight(call, ttft, generation, stall)
        return call, ttft, generation, stall, drawn, truncated

    def _slot(
        self, step: Step, sid: str, attempt: int, plan: Attempt, resend: int, sdk: int
    ) -> tuple[CallDraws, float, bool]:
        """Look up a call slot's draws in the bank (and its prefill seconds) and keep them,
        with whether its draws are used as drawn: no difficulty, no hardness on its model, a
        fixed answer length, no client overhead or bad-spell error, no flights kept."""
        path = (plan.provider, plan.model)
        latency = self.latencies[path]
        draws = self.bank.draws(sid, attempt, resend, path, latency, step.output_tokens, sdk)
        prefill = latency.ttft_s_per_ktok * step.input_tokens / 1000
        provider = self.providers[plan.provider]
        as_drawn = (
            self.difficulty is None
            and (self.hardness is None or plan.model not in self.hardness.effects)
            and not self.shaped_steps[step.index]
            and provider.overhead is None
            and not provider.spell_error_rate > 0
            and not self.keeps_flights
            and not latency.streams
        )
        slot = (draws, prefill if latency.ttft_s_per_ktok > 0 else 0.0, as_drawn)
        self._slots[(plan.provider, plan.model, sid, attempt, resend, sdk)] = slot
        return slot

    def _check_answer(
        self, handle: StepHandle, call: Call, truncated: bool
    ) -> Generator[simpy.Event, Any, None]:
        """A delivered answer cut at `max_tokens` is truncated (invalid, caught for free); an
        answer (valid or junk) then goes through the step's validator, if it has one."""
        if truncated and call.outcome == OUTCOME_OK:
            call.outcome = OUTCOME_TRUNCATED
        validator = handle.step.validator
        if validator is not None and call.outcome in (OUTCOME_OK, OUTCOME_INVALID):
            latency = self.latencies[(call.provider, call.model)]
            yield from self._validate(handle.run, call, validator, latency, call.attempt)

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
        sid = draw_id(call.step, call.iteration)
        block = self.bank.uniforms(sid, attempt, run.resend, call.sdk_retry)
        v = float(block[run.index, U_OUTCOME])
        band = latency.invalid_rate  # the invalid band's width (a hard request's junk rate)
        if self.hardness is not None:
            band = self.hardness.junk_rate((call.provider, call.model), self.bank, run.index, band)
        w = (v - latency.error_rate) / band if band > 0 else 0.0
        if not w < validator.catches:
            call.outcome, call.valid = OUTCOME_OK, False

    def _sdk_retries(
        self,
        handle: StepHandle,
        provider: Provider,
        attempt: int,
        plan: Attempt,
        call: Call,
        limits: AttemptLimits,
    ) -> Generator[simpy.Event, Any, Call]:
        """The SDK's hidden retries inside one policy attempt: after a failure in its
        `retry_on` (a 429, a hard error, its own timeout) it waits (`sdk_wait`: Retry-After or
        backoff) and calls again, up to `sdk.retries` times, each call cut at its `timeout_s`
        or what is left of the policy's cut, whichever is first. It gives up when the attempt
        is cancelled while it waits; with admission, when the time left cannot fund the wait
        and an attempt (counted as a refused retry). When the wait would pass the policy's cut
        or the deadline, a client that `honours_deadline` gives up at once; one that does not
        sleeps until the cut (the attempt ends there) or the deadline's cancellation."""
        run, env, sdk = handle.run, self.env, provider.sdk
        retried = provider.sdk_retried
        began = call.start
        received = call.input_tokens - handle.step.input_tokens  # the client resends as sent
        for j in range(1, provider.sdk_retries + 1):
            if run.closed or call.outcome not in retried:
                break
            if call.outcome == OUTCOME_TIMEOUT and call.ended_by != BY_SDK:
                break  # the caller's cut, not the client's: never retried by the client
            u = self.bank.uniform(run.index, "sdk-backoff", handle.draw_id, attempt, run.resend, j)
            wait = sdk_wait(sdk, j, u, call.retry_after, call.retry_after_ms)
            if wait is None:  # the client does not retry this one (openai: Retry-After > 120 s)
                break
            left = None
            if plan.give_up_after is not None:
                left = plan.give_up_after - (env.now - began) - wait
                if left <= 0:  # the policy's cut comes first: the attempt ends with this failure
                    if not sdk.honours_deadline:  # ... once the client has slept until it
                        yield from _sleep(env, left + wait)
                    break
            if wait >= handle.time_left and sdk.honours_deadline:
                break
            if not handle.admits(wait, attempt, j):
                break
            if wait > 0 and not (yield from _sleep(env, wait)):
                break  # cancelled while the SDK slept
            if run.closed:
                break
            call, ttft, generation, stall, drawn, truncated = self._prepare(
                handle, provider, attempt, plan, j, received
            )
            cut, sdk_label, first, idle = client_cuts(provider, handle.step.stream, plan, left)
            try:
                if handle.plain and first is None and idle is None:
                    yield from serve(provider, call, ttft, generation, stall, drawn, cut)
                else:
                    yield from serve(
                        provider, call, ttft, generation, stall, drawn, cut,
                        limits.queue, limits.start_by, limits.service, first, idle,
                    )  # fmt: skip
                if call.ended_by == sdk_label and call.outcome == OUTCOME_TIMEOUT:
                    call.ended_by = BY_SDK
                if truncated or handle.step.validator is not None:
                    yield from self._check_answer(handle, call, truncated)
            finally:  # recorded, however it ended (as at the end of `attempt`)
                run.calls += 1
                run.cost += call.cost
                run.tokens += call.billed_input + call.billed_output
                self.calls.append(call)
            self._label(handle, call, attempt, limits.by)
        return call


def _keep_received(handle: StepHandle, call: Call) -> None:
    """After a call under `resume`: a stream broken or cut (a timeout) once tokens had come
    leaves the step holding the tokens before it and those it streamed (the most any of the
    step's calls reached); a cancelled call (deadline, a race's loser) or one with no token
    (a first-token cut, a 429, an error) leaves it as it was."""
    outcome = call.outcome
    if outcome == OUTCOME_BROKEN or (outcome == OUTCOME_TIMEOUT and call.tokens_streamed > 0):
        held = call.input_tokens - handle.step.input_tokens + call.tokens_streamed
        handle.received = max(handle.received, held)


def client_cuts(
    provider: Provider, stream: bool, plan: Attempt, cut: float | None
) -> tuple[float | None, str | None, float | None, float | None]:
    """A call's cuts with its client's own timeout (`sdk.timeout_s`) folded in: (total cut,
    the `ended_by` a cut by the client's timeout gets before it is relabelled `sdk` and so
    retried by the client (None: that timeout binds no cut), first-token cut, idle cut).

    Without a stream the timeout bounds the whole call, as today. On a stream it is the read
    timeout between bytes (openai's and anthropic's `timeout` is httpx's read timeout;
    LiteLLM's `stream_timeout`, `sdk.stream_timeout_s`, replaces its timeout there:
    docs/clients.md): the longest wait for the first token from the send (a cut there the
    client retries, as it retries a timeout before the response headers) and for each next
    token (a mid-stream cut it does not retry: httpx raises while the answer is being read)."""
    first, idle = plan.first_token_after, plan.idle_after
    timeout = provider.sdk_stream_timeout if stream else provider.sdk_timeout
    if timeout is None:
        return cut, None, first, idle
    if not stream:
        if cut is None or timeout < cut:
            return timeout, "", first, idle
        return cut, None, first, idle
    label: str | None = None
    if first is None or timeout < first:
        first, label = timeout, BY_TTFT
    if idle is None or timeout < idle:
        idle = timeout
    if cut is not None and cut <= first:
        label = None
    return cut, label, first, idle


def _sleep(env: simpy.Environment, seconds: float) -> Generator[simpy.Event, Any, bool]:
    """Sleep `seconds` (if positive); False if cancelled meanwhile."""
    if seconds > 0:
        try:
            yield env.timeout(seconds)
        except simpy.Interrupt:
            return False
    return True
