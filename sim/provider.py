"""One provider: a simpy queue of `concurrency` slots, its shared quota, and the life of a call.

A call's life is written out in one place, `Provider.call`: sent (429 if over quota), queued for
a slot, first token, generating, then done or cancelled. A cancelled or cut call stops holding
its slot at once; what it is billed follows the scenario's billing rule.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from sim.config import ProviderSpec
from sim.latency import ERROR, INVALID, OK, CallLatency
from sim.ratelimit import Quota

# Outcomes of a call (the `outcome` column).
OUTCOME_OK = "ok"
OUTCOME_INVALID = "invalid"
OUTCOME_ERROR = "error"
OUTCOME_TIMEOUT = "timeout"
OUTCOME_CANCELLED = "cancelled"
OUTCOME_RATE_LIMITED = "rate_limited"
OUTCOME_TRUNCATED = "truncated"  # cut at the step's max_tokens: invalid, caught for free
OUTCOMES = (
    OUTCOME_OK,
    OUTCOME_INVALID,
    OUTCOME_ERROR,
    OUTCOME_TIMEOUT,
    OUTCOME_CANCELLED,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TRUNCATED,
)
_DRAWN = {OK: OUTCOME_OK, ERROR: OUTCOME_ERROR, INVALID: OUTCOME_INVALID}
#: Relative tolerance under which two simulated times are the same instant (float rounding).
_SAME_INSTANT = 1e-12


@dataclass(slots=True)
class Call:
    """One LLM call, filled in as it lives; becomes one row of calls.parquet."""

    run: Any  # the engine's Run this call belongs to
    step: str
    attempt: int
    provider: str
    model: str
    start: float
    input_tokens: int  # tokens asked for; the billed counts are set when the call ends
    output_tokens: int
    queue: float = math.nan
    ttft: float = math.nan
    end: float = math.nan
    outcome: str = ""
    billed_input: int = 0
    billed_output: int = 0
    cost: float = 0.0
    retry_after: float = math.nan  # a 429's Retry-After: seconds until the quota admits it
    quota_tokens: int = 0  # tokens the provider's TPM quota took at admission (0 for a 429)
    valid: bool = True  # False: an invalid answer the step's validator let through (outcome ok)


@dataclass(frozen=True, slots=True)
class Serving:
    """A model as this provider serves it: latency law and prices (USD per token)."""

    latency: CallLatency
    price_input: float
    price_output: float


class Provider:
    """A serving path's shared state in one simulation: slots and quota."""

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        spec: ProviderSpec,
        serving: dict[str, Serving],
        billing: str,
    ) -> None:
        self.env = env
        self.name = name
        self.slots = simpy.Resource(env, capacity=spec.concurrency)
        self.quota = Quota(spec.tpm, spec.rpm)
        self.serving = serving
        self.billing = billing

    def call(
        self,
        call: Call,
        ttft: float,
        generation: float,
        stall: float,
        drawn: int,
        give_up_after: float | None,
    ) -> Generator[simpy.Event, Any, Call]:
        """Live one call to its end and return it with outcome, times and bill filled in.

        `give_up_after` (seconds from the call's start) cuts the call with outcome 'timeout'.
        An `Interrupt` (race loser, deadline) ends it with outcome 'cancelled'.
        """
        env = self.env
        tokens = call.input_tokens + call.output_tokens
        if not self.quota.admit(env.now, tokens):
            call.queue = 0.0
            call.retry_after = self.quota.retry_after(env.now, tokens)
            return self._end(call, OUTCOME_RATE_LIMITED)
        call.quota_tokens = tokens
        slot = self.slots.request()
        served_at = math.nan
        try:
            if not slot.triggered:
                if give_up_after is None:
                    yield slot
                else:
                    yield slot | env.timeout(give_up_after)
                    if not slot.triggered:  # cut while still queued: never served
                        call.queue = env.now - call.start
                        return self._end(call, OUTCOME_TIMEOUT)
            served_at = env.now
            call.queue = served_at - call.start
            service = ttft if drawn != OK else ttft + generation + stall
            left = math.inf if give_up_after is None else give_up_after - call.queue
            if left <= _SAME_INSTANT * max(1.0, call.queue):
                # granted its slot at its give-up instant (up to rounding): cut, never served
                return self._end(call, OUTCOME_TIMEOUT)
            if service <= left:
                yield env.timeout(service)
                if drawn != ERROR:
                    call.ttft = ttft
                self._bill(call, drawn)
                return self._end(call, _DRAWN[drawn])
            yield env.timeout(left)
            self._bill_cut(call, drawn, ttft, generation + stall, env.now - served_at)
            return self._end(call, OUTCOME_TIMEOUT)
        except simpy.Interrupt:
            if math.isnan(served_at) or env.now == served_at:  # never served for any time
                call.queue = env.now - call.start
            else:
                self._bill_cut(call, drawn, ttft, generation + stall, env.now - served_at)
            return self._end(call, OUTCOME_CANCELLED)
        finally:
            if slot.triggered:  # held a slot (or was just granted one): give it back
                self.slots.release(slot)
            else:  # still queued: leave the queue, so it never takes a slot later
                slot.cancel()

    def _end(self, call: Call, outcome: str) -> Call:
        call.end = self.env.now
        call.outcome = outcome
        serving = self.serving[call.model]
        call.cost = (
            call.billed_input * serving.price_input + call.billed_output * serving.price_output
        )
        return call

    @staticmethod
    def _bill(call: Call, drawn: int) -> None:
        """A call that ran to its end: answers bill input and output, junk input, errors nothing."""
        if drawn == OK:
            call.billed_input, call.billed_output = call.input_tokens, call.output_tokens
        elif drawn == INVALID:
            call.billed_input = call.input_tokens

    def _bill_cut(
        self, call: Call, drawn: int, ttft: float, generating: float, elapsed: float
    ) -> None:
        """A call stopped after it got a slot: billed per the scenario's `billing.cancelled`."""
        if self.billing == "none" or drawn == ERROR:
            return
        call.billed_input = call.input_tokens
        if drawn == INVALID:
            return
        if self.billing == "full":
            call.billed_output = call.output_tokens
        elif elapsed > ttft:
            done = min(1.0, (elapsed - ttft) / generating) if generating > 0 else 1.0
            call.billed_output = int(call.output_tokens * done)
