"""A call on its provider in the event engine: `serve` lives it from its send to its end.

Quota admission or a 429 with its Retry-After, the queue for a slot, service stretched by load
and bad spells, its stream (a mid-stream stall's onset, a break: `sim.model.stream`), the cut,
an interrupt's cancellation, client overhead and the bill. `sim.engine.event_calls` makes the
calls; this module is apart from it only for the 600-line limit. It is the event engine's
hottest path: `serve` writes its stages out inline on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import simpy

from sim.engine.kernel import SAME_INSTANT
from sim.engine.provider import Provider
from sim.model.latency import BROKEN, ERROR, INVALID, OK
from sim.model.rows import (
    OUTCOME_BROKEN,
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    Call,
)
from sim.model.stream import streamed_share, time_to_share

_DRAWN = {OK: OUTCOME_OK, ERROR: OUTCOME_ERROR, INVALID: OUTCOME_INVALID, BROKEN: OUTCOME_BROKEN}
_INF = math.inf


def serve(
    provider: Provider,
    call: Call,
    ttft: float,
    generation: float,
    stall: float,
    drawn: int,
    give_up_after: float | None,
    queue_limit: float | None = None,
    start_by: float = math.inf,
    service_limit: float | None = None,
    first_token_after: float | None = None,
    idle_after: float | None = None,
    on_served: Callable[[float, float, float, int], None] | None = None,
) -> Generator[simpy.Event, Any, Call]:
    """Live one call on `provider` to its end and return it with outcome, times and bill.

    Sent (a 429 if over a quota, with the Retry-After the provider would send), queued for a
    slot, served (stretched by load and bad spells when those are on), first token, generating,
    then done or cancelled. `give_up_after` (seconds from the call's start) cuts the call with
    outcome 'timeout'. `queue_limit` (seconds) abandons it if no slot is free by then
    (`ended_by` 'queue'); a call granted its slot after the time `start_by` (picked up too late
    to finish in time) refuses to start (`ended_by` 'admission', never served); `service_limit`
    (seconds from the slot grant) cuts it with outcome 'timeout' (`ended_by` 'attempt'). An
    `Interrupt` (race loser, deadline) ends it with outcome 'cancelled' and the interrupt's
    cause as `ended_by`. A call stopped after it got a slot is billed per `billing.cancelled`.
    With client overhead, its held part holds the slot before the first token and the rest
    delays what the caller sees after the slot is freed (`_late`).

    One generator of about 100 lines on purpose: the slot is taken and given back in one
    try/finally, so an interrupt at any of its yields releases the slot (or leaves the queue)
    in one place, and it is the event engine's hottest path (split into sub-generators, each
    call would pay a `yield from` per stage). `on_served(ttft, generation, stall, drawn)`, if
    given, hears the call's service as it starts (the harness streams its tokens from it).
    """
    env = provider.env
    charge = call.reserved if provider.reserve else call.output_tokens
    tokens = call.input_tokens + charge
    if not provider.limited or (
        not provider.model_quotas and provider.quota.admit(env.now, tokens, call.input_tokens)
    ):
        call.quota_tokens = tokens
    elif not provider.admit(call, charge):  # per-model quotas, or a 429 (Retry-After set)
        call.queue = 0.0
        if call.overhead:  # the client sees the 429 after its whole overhead
            left = _INF if give_up_after is None else give_up_after
            return (yield from _late(provider, call, OUTCOME_RATE_LIMITED, call.overhead, left, ""))
        return _end(provider, call, OUTCOME_RATE_LIMITED)
    slots = provider.slots
    granted = slots.count < slots.capacity and not slots.queue
    slot: simpy.Event | None = None
    if granted:  # a free slot and nobody queued: taken at once (`Slots.take`, inlined)
        slots.count += 1
    served_at = math.nan
    released = False  # the slot was given back before the call's end (overhead after it)
    try:
        if not granted:
            slot = slots.wait()
        if slot is not None and not slot.triggered:
            wait_limit = give_up_after
            by_queue = queue_limit is not None and (
                give_up_after is None or queue_limit < give_up_after
            )
            if by_queue:
                wait_limit = queue_limit
            by_first = first_token_after is not None and (
                wait_limit is None or first_token_after < wait_limit
            )
            if by_first:  # no first token while queued either
                wait_limit, by_queue = first_token_after, False
            if wait_limit is None:
                yield slot
            else:
                yield slot | env.timeout(wait_limit)
                if not slot.triggered:  # cut while still queued: never served
                    call.queue = env.now - call.start
                    if by_queue:
                        call.ended_by = "queue"
                    elif by_first:
                        call.ended_by = "first_token"
                    return _end(provider, call, OUTCOME_TIMEOUT)
        served_at = env.now
        call.queue = served_at - call.start
        if provider.shaped:
            factor, spell = provider.stretch()
            ttft, generation = ttft * factor, generation * factor
            if spell and drawn != ERROR and call.spell_u < provider.spell_error_rate:
                drawn = ERROR
        after = 0.0
        if call.overhead:  # the held part delays the first token; the rest comes after
            held = call.overhead * provider.overhead_held
            after = call.overhead - held
            ttft += held
        service = ttft if drawn != OK else ttft + generation + stall
        if drawn == BROKEN:  # its stream breaks after a share of its tokens
            service = ttft + time_to_share(call.broken_at, generation, stall, call.onset)
        queued = call.queue
        left = _INF if give_up_after is None else give_up_after - queued
        if service_limit is not None and service_limit < left:
            left = service_limit
            call.ended_by = "attempt"  # kept only if this limit cuts the call
        if first_token_after is not None or idle_after is not None:
            left = _stream_cut(call, ttft, generation, stall, drawn, queued, left,
                               first_token_after, idle_after)  # fmt: skip
        if left < _INF and left <= SAME_INSTANT * (queued if queued > 1.0 else 1.0):
            # granted its slot at its give-up instant (up to rounding): cut, never served
            return _end(provider, call, OUTCOME_TIMEOUT)
        if served_at >= start_by:  # picked up too late to finish: refuses to start
            call.ended_by = "admission"
            return _end(provider, call, OUTCOME_TIMEOUT)
        if on_served is not None:
            on_served(ttft, generation, stall, drawn)
        if service <= left:
            cut_by, call.ended_by = call.ended_by, ""
            yield env.timeout(service)
            if drawn == OK:  # an answer: billed input and output
                call.ttft = ttft
                call.billed_input, call.billed_output = call.input_tokens, call.output_tokens
                call.tokens_streamed = call.output_tokens
            elif drawn == INVALID:  # junk: billed its input; an error bills nothing
                call.ttft = ttft
                call.billed_input = call.input_tokens
            elif drawn == BROKEN:  # billed as a call cut where it broke
                call.ttft = ttft
                _bill_broken(provider, call)
            if after > 0.0:  # served: the slot is free, the caller sees it `after` later
                released = True
                slots.release()
                left -= service
                return (yield from _late(provider, call, _DRAWN[drawn], after, left, cut_by))
            # its end (as `_end`, written out: nearly every call ends here)
            call.end, call.outcome = env.now, _DRAWN[drawn]
            serving = provider.serving[call.model]
            call.cost = (
                call.billed_input * serving.price_input + call.billed_output * serving.price_output
            )
            return call
        yield env.timeout(left)
        _bill_cut(provider, call, drawn, ttft, generation, stall, env.now - served_at)
        return _end(provider, call, OUTCOME_TIMEOUT)
    except simpy.Interrupt as stop:
        call.ended_by = str(stop.cause)
        if math.isnan(served_at) or env.now == served_at:  # never served for any time
            call.queue = env.now - call.start
        else:
            _bill_cut(provider, call, drawn, ttft, generation, stall, env.now - served_at)
        return _end(provider, call, OUTCOME_CANCELLED)
    finally:
        if released:
            pass
        elif slot is None or slot.triggered:  # held a slot (or was just granted one)
            slots.release()
        else:  # still queued: leave the queue, so it never takes a slot later
            slots.cancel(slot)


def _late(
    provider: Provider, call: Call, outcome: str, delay: float, left: float, cut_by: str
) -> Generator[simpy.Event, Any, Call]:
    """The end of a call the caller sees `delay` seconds (client overhead) after the provider
    is done with it: `outcome` then; a timeout (`ended_by` `cut_by`) if the client's cut, `left`
    seconds away, comes first; cancelled if interrupted. Billed as the provider billed it."""
    env = provider.env
    try:
        if delay <= left:
            yield env.timeout(delay)
        else:
            yield env.timeout(max(left, 0.0))
            outcome, call.ended_by = OUTCOME_TIMEOUT, cut_by
    except simpy.Interrupt as stop:
        outcome, call.ended_by = OUTCOME_CANCELLED, str(stop.cause)
    return _end(provider, call, outcome)


def _end(provider: Provider, call: Call, outcome: str) -> Call:
    """A call ends now with `outcome`, costed at its model's prices on this provider."""
    call.end = provider.env.now
    call.outcome = outcome
    serving = provider.serving[call.model]
    call.cost = call.billed_input * serving.price_input + call.billed_output * serving.price_output
    return call


def _bill_cut(
    provider: Provider,
    call: Call,
    drawn: int,
    ttft: float,
    generation: float,
    stall: float,
    elapsed: float,
) -> None:
    """A call stopped after it got a slot: the tokens it streamed by then (`sim.model.stream`),
    billed per the scenario's `billing.cancelled` (elapsed: its input and what streamed)."""
    if drawn in (OK, BROKEN) and elapsed > ttft:
        share = streamed_share(elapsed - ttft, generation, stall, call.onset)
        call.tokens_streamed = int(call.output_tokens * share)
    if provider.billing == "none" or drawn == ERROR:
        return
    call.billed_input = call.input_tokens
    if drawn == INVALID:
        return
    if provider.billing == "full":
        call.billed_output = call.output_tokens
    else:
        call.billed_output = call.tokens_streamed


def _bill_broken(provider: Provider, call: Call) -> None:
    """A call whose stream broke: the tokens before the break streamed, billed as a cut there
    (`billing.cancelled`: none nothing, full its whole answer, elapsed its input and those)."""
    call.tokens_streamed = int(call.output_tokens * call.broken_at)
    if provider.billing == "none":
        return
    call.billed_input = call.input_tokens
    full = provider.billing == "full"
    call.billed_output = call.output_tokens if full else call.tokens_streamed


def _stream_cut(
    call: Call,
    ttft: float,
    generation: float,
    stall: float,
    drawn: int,
    queued: float,
    left: float,
    first_token_after: float | None,
    idle_after: float | None,
) -> float:
    """The seconds after its slot grant at which the cuts that watch the stream stop the call,
    if sooner than `left` (labelled `ended_by` first_token or idle): no first token
    `first_token_after` seconds after its send; a mid-stream stall longer than `idle_after`,
    cut that long after its onset."""
    if first_token_after is not None:
        at = first_token_after - queued
        if ttft > at and at < left:
            left, call.ended_by = at, "first_token"
    onset = call.onset
    if (
        idle_after is not None
        and stall > idle_after
        and not math.isnan(onset)
        and (drawn == OK or (drawn == BROKEN and call.broken_at > onset))
    ):
        at = ttft + onset * generation + idle_after
        if at < left:
            left, call.ended_by = at, "idle"
    return left
