"""One provider: a simpy queue of `concurrency` slots, its shared quotas, and the life of a call.

A call's life is written out in one place, `Provider.call`: sent (429 if over a quota, with the
Retry-After the provider would send), queued for a slot, served (stretched by load and bad
spells when those are on), first token, generating, then done or cancelled. A cancelled or cut
call stops holding its slot at once; what it is billed follows the scenario's billing rule. With
client overhead (`overhead_s`), its held part holds the slot before the first token and the
rest delays what the caller sees after the slot is freed (`Provider._late`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any

import numpy as np
import simpy
from simpy.core import BoundClass, EmptySchedule, EventPriority, StopSimulation
from simpy.events import NORMAL, URGENT, Initialize, Process, Timeout

from sim.model.conditions import Episodes
from sim.model.config import ProviderSpec, ServingSpec
from sim.model.latency import ERROR, INVALID, OK, CallLatency, Distribution, build_distribution
from sim.model.ratelimit import Quota, retry_after_header

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
_INF = math.inf
#: An event's bare allocation (its fields are set by `Environment.timeout` and `.process`).
_new_event = object.__new__


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
    retry_after: float = math.nan  # a 429's Retry-After as the provider sends it, seconds
    retry_after_ms: float = math.nan  # a 429's retry-after-ms (if the provider sends it), s
    overhead: float = 0.0  # client, HTTP and event-loop seconds of this call (overhead_s)
    quota_tokens: int = 0  # tokens the provider's TPM quota took at admission (0 for a 429)
    sdk_retry: int = 0  # 0: the policy's call; j: the SDK's j-th retry of it
    reserved: int = 0  # the answer's token cap (what a `charge: max_tokens` quota takes)
    spell_u: float = 1.0  # the call's uniform for a bad spell's extra hard error
    valid: bool = True  # False: an invalid answer the step's validator let through (outcome ok)
    ended_by: str = ""  # the budget or event that ended it early ("" if it ended on its own)


class Environment(simpy.Environment):
    """simpy's Environment that also keeps the queue entry it is processing (`step` is simpy's,
    plus one assignment), so that `Slots` can tell whether a wake-up it left out of the queue
    would already have been processed."""

    #: The current simulated time, a plain attribute kept equal to simpy's `_now` (it shadows
    #: simpy's `now` property: read on every call's hot path, an attribute is cheaper).
    now: float = 0.0

    def __init__(self, initial_time: float = 0) -> None:
        super().__init__(initial_time)
        self.now = self._now
        # simpy binds `timeout`, `process`, ... to the instance only from its own class's
        # dict: bind simpy.Environment's too, or every `env.timeout` goes through a descriptor
        for name, attribute in vars(simpy.Environment).items():
            if isinstance(attribute, BoundClass):
                setattr(self, name, getattr(self, name))
        #: (time, priority, id, event) of the event being processed (none yet: -1 priorities).
        self.current: tuple[float, int, int, Any] = (initial_time, -1, -1, None)
        #: The event ids `schedule` takes from: `next(ids)` reserves a place in the event order.
        self.ids = self._eid

    def timeout(self, delay: float, value: Any = None) -> Timeout:  # type: ignore[override]
        """`simpy.Timeout(self, delay, value)`: the same event with the same place in the
        order, its `__init__` and `schedule` written out (one timeout per call: hot path)."""
        if delay < 0:
            raise ValueError(f"Negative delay {delay}")
        event = _new_event(Timeout)
        event.env = self
        event.callbacks = []
        event._value = value
        event._delay = delay
        event._ok = True
        heappush(self._queue, (self._now + delay, NORMAL, next(self._eid), event))
        return event

    def process(self, generator: Generator[Any, Any, Any]) -> Process:  # type: ignore[override]
        """`simpy.Process(self, generator)`: the same process and `Initialize` event with the
        same place in the order, their `__init__`s and `schedule` written out (hot path: one
        per run, and one per parallel attempt)."""
        process = _new_event(Process)
        process.env = self
        process.callbacks = []
        process._generator = generator
        start = _new_event(Initialize)
        start.env = self
        start.callbacks = [process._resume]
        start._value = None
        start._ok = True
        heappush(self._queue, (self._now, URGENT, next(self._eid), start))
        process._target = start
        return process

    def schedule_reserved(self, event: Any, eid: int) -> None:
        """Schedule `event` now with normal priority at the place of reserved id `eid`."""
        heappush(self._queue, (self._now, NORMAL, eid, event))

    def passed(self, eid: int) -> bool:
        """True if an event scheduled now with normal priority and id `eid` would already have
        been processed (the event being processed comes after it in the order)."""
        _, priority, current, _ = self.current
        return priority > NORMAL or (priority == NORMAL and eid < current)

    def step(self) -> None:
        """Process the next event (as `simpy.Environment.step`, keeping its queue entry)."""
        try:
            entry = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        self.current = entry
        self.now, _, _, event = entry
        self._now = self.now
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1 :]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            self._crash(event)

    def run(self, until: Any = None) -> Any:
        """`simpy.Environment.run`; to the end of the schedule (`until` None) it is `step`
        written out in one loop, one method call less per event."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        try:
            while queue:
                entry = heappop(queue)
                self.current = entry
                self.now, _, _, event = entry
                self._now = self.now
                callbacks, event.callbacks = event.callbacks, None
                try:
                    for callback in callbacks:
                        callback(event)
                except StopSimulation:
                    event.callbacks = callbacks[callbacks.index(callback) + 1 :]
                    self.schedule(event, EventPriority(-1))
                    raise
                if not event._ok and not hasattr(event, "_defused"):
                    self._crash(event)
        except StopSimulation as stop:
            return stop.args[0]
        return None

    @staticmethod
    def _crash(event: Any) -> None:
        """A failed event nobody defused crashes the simulation (as in simpy)."""
        exc = type(event._value)(*event._value.args)
        exc.__cause__ = event._value
        raise exc


class _Wake:
    """A freed slot's wake-up in simpy's queue: when processed, it grants the head of the slot
    queue (what processing simpy's `Release` event does), with no event object behind it."""

    __slots__ = ("callbacks",)
    _ok = True  # read by `simpy.Environment.step`: a wake-up never fails

    def __init__(self, grant: Any) -> None:
        self.callbacks = [grant]


class Slots:
    """A provider's `concurrency` slots: `simpy.Resource`'s grants, in its order, without its
    events where nothing waits on them.

    A call takes a free slot at once when nobody is queued (simpy would schedule a `Request`
    event that no process waits for); otherwise it queues on a plain event, granted first in,
    first out. A release frees the slot at once and schedules a wake-up that grants the head of
    the queue, exactly where simpy schedules its `Release` event, so every grant happens at the
    same point of the event order as with `simpy.Resource`.

    With nobody queued a wake-up does nothing unless a call queues before it comes up, which
    can only happen at the same instant. In an `Environment`, such a wake-up is left out and
    only its place in the event order is kept; a call queueing at that instant puts back those
    not yet due (those already due found the queue empty: nothing to put back).
    """

    __slots__ = ("_grant", "_ids", "capacity", "count", "env", "queue", "skipped", "skipped_at")

    def __init__(self, env: simpy.Environment, capacity: int) -> None:
        self.env = env
        self.capacity = capacity
        self.count = 0  # slots held
        self.queue: deque[simpy.Event] = deque()  # calls waiting for a slot, oldest first
        self._grant = self._grant_head
        #: The environment's event ids (None: a plain simpy environment, every wake-up kept).
        self._ids = env.ids if isinstance(env, Environment) else None
        #: Reserved event ids of the wake-ups left out, all at time `skipped_at`.
        self.skipped: list[int] = []
        self.skipped_at = math.nan

    def take(self) -> bool:
        """Take a slot at once if one is free and nobody is queued before this call."""
        if self.count < self.capacity and not self.queue:
            self.count += 1
            return True
        return False

    def wait(self) -> simpy.Event:
        """Queue for a slot (after `take` said no): the event succeeds when it is granted. As a
        new simpy request does, this grants the head of the queue if a slot is free."""
        env = self.env
        if self.skipped:  # the wake-ups left out at this instant and not yet due go back
            assert isinstance(env, Environment)
            if self.skipped_at == env.now:
                for eid in self.skipped:
                    if not env.passed(eid):
                        env.schedule_reserved(_Wake(self._grant), eid)
            self.skipped.clear()
        event = simpy.Event(env)
        self.queue.append(event)
        self._grant_head(None)
        return event

    def _grant_head(self, _: object) -> None:
        if self.queue and self.count < self.capacity:
            self.count += 1
            self.queue.popleft().succeed()

    def release(self) -> None:
        """Give a held slot back; the head of the queue gets it when the wake-up is processed."""
        self.count -= 1
        if self.queue or self._ids is None:
            self.env.schedule(_Wake(self._grant))  # type: ignore[arg-type]
            return
        now = self.env.now
        if now != self.skipped_at:  # earlier instants' wake-ups are long due
            self.skipped_at = now
            self.skipped.clear()
        self.skipped.append(next(self._ids))

    def cancel(self, event: simpy.Event) -> None:
        """Leave the queue (a call cut or cancelled before its grant never takes a slot)."""
        self.queue.remove(event)


@dataclass(frozen=True, slots=True)
class Serving:
    """A model as this provider serves it: latency law and prices (USD per token)."""

    latency: CallLatency
    price_input: float
    price_output: float


class Provider:
    """A serving path's shared state in one simulation: slots, quotas, load and bad spells.

    `episodes_rng` is the provider's own bad-spell stream (needed only with `episodes`).
    """

    def __init__(
        self,
        env: simpy.Environment,
        name: str,
        spec: ProviderSpec,
        serving: dict[str, Serving],
        billing: str,
        episodes_rng: np.random.Generator | None = None,
    ) -> None:
        self.env = env
        self.name = name
        self.slots = Slots(env, spec.concurrency)
        self.quota = _quota(spec, spec)
        self.model_quotas = {
            model: q
            for model, serves in spec.serves.items()
            if not (q := _quota(serves, spec)).unlimited
        }
        #: Admission checks any quota at all (off: no cost on the hot path).
        self.limited = not self.quota.unlimited or bool(self.model_quotas)
        self.reserve = spec.charge == "max_tokens"
        self.retry_after_mode = spec.retry_after
        self.sdk = spec.sdk
        self.sdk_retries = spec.sdk.retries
        #: The client's per-attempt timeout (None: none), restarted on each SDK retry.
        self.sdk_timeout = spec.sdk.timeout_s
        #: The call outcomes the client retries (its `retry_on`; timeouts: its own only).
        self.sdk_retried = frozenset(
            outcome
            for outcome, kind in (
                (OUTCOME_RATE_LIMITED, "429"),
                (OUTCOME_ERROR, "5xx"),
                (OUTCOME_TIMEOUT, "timeout"),
            )
            if kind in spec.sdk.retry_on
        )
        #: A 429 also carries retry-after-ms (the exact wait, rounded up to the millisecond).
        self.sends_retry_after_ms = spec.retry_after_ms
        #: Per-call overhead law (None: off) and the share of it that holds the slot.
        self.overhead: Distribution | None = None
        if spec.overhead_s is not None:
            self.overhead = build_distribution(spec.overhead_s)
        self.overhead_held = spec.overhead_held
        self.slowdown = spec.slowdown
        self.episodes: Episodes | None = None
        self.spell_slowdown, self.spell_error_rate = 1.0, 0.0
        if spec.episodes is not None:
            if episodes_rng is None:
                raise ValueError(f"provider {name}: episodes need their random stream")
            self.episodes = Episodes(spec.episodes, episodes_rng)
            self.spell_slowdown = spec.episodes.slowdown
            self.spell_error_rate = spec.episodes.error_rate
        #: Service is stretched by load or bad spells (off: no cost on the hot path).
        self.shaped = self.slowdown is not None or self.episodes is not None
        self.serving = serving
        self.billing = billing

    def admit(self, call: Call, charge_output: int) -> bool:
        """Charge a call to the provider's quotas and its model's (all or nothing); on a 429 set
        the Retry-After the provider sends. Failed and cancelled calls keep their charge."""
        now = self.env.now
        tokens = call.input_tokens + charge_output
        scoped = self.model_quotas.get(call.model)
        if scoped is None:
            if self.quota.admit(now, tokens, call.input_tokens):
                call.quota_tokens = tokens
                return True
        elif self.quota.fits(now, tokens, call.input_tokens) and scoped.fits(
            now, tokens, call.input_tokens
        ):
            self.quota.take(now, tokens, call.input_tokens)
            scoped.take(now, tokens, call.input_tokens)
            call.quota_tokens = tokens
            return True
        quotas = [self.quota] if scoped is None else [self.quota, scoped]
        exact = max(q.retry_after(now, tokens, call.input_tokens) for q in quotas)
        reset = max(q.reset_after(now) for q in quotas) if self.retry_after_mode == "window" else 0
        call.retry_after = retry_after_header(self.retry_after_mode, exact, reset)
        if self.sends_retry_after_ms:
            call.retry_after_ms = math.ceil(exact * 1000) / 1000 if math.isfinite(exact) else exact
        return False

    def stretch(self) -> tuple[float, bool]:
        """(factor on first token and generation, bad spell on?) for a call served now."""
        factor = 1.0
        if self.slowdown is not None:
            slots = self.slots
            factor = 1.0 + self.slowdown.a * (slots.count / slots.capacity) ** self.slowdown.k
        spell = self.episodes is not None and self.episodes.active(self.env.now)
        if spell:
            factor *= self.spell_slowdown
        return factor, spell

    def call(
        self,
        call: Call,
        ttft: float,
        generation: float,
        stall: float,
        drawn: int,
        give_up_after: float | None,
        queue_limit: float | None = None,
        start_by: float = math.inf,
        service_limit: float | None = None,
    ) -> Generator[simpy.Event, Any, Call]:
        """Live one call to its end and return it with outcome, times and bill filled in.

        `give_up_after` (seconds from the call's start) cuts the call with outcome 'timeout'.
        `queue_limit` (seconds) abandons it if no slot is free by then (`ended_by` 'queue');
        a call granted its slot after the time `start_by` (picked up too late to finish in
        time) refuses to start (`ended_by` 'admission', never served); `service_limit`
        (seconds from the slot grant) cuts it with outcome 'timeout' (`ended_by` 'attempt').
        An `Interrupt` (race loser, deadline) ends it with outcome 'cancelled' and the
        interrupt's cause as `ended_by`.

        One generator of about 100 lines on purpose: the slot is taken and given back in one
        try/finally, so an interrupt at any of its yields releases the slot (or leaves the
        queue) in one place, and it is the event engine's hottest path (split into
        sub-generators, each call would pay a `yield from` per stage).
        """
        env = self.env
        charge = call.reserved if self.reserve else call.output_tokens
        tokens = call.input_tokens + charge
        if not self.limited or (
            not self.model_quotas and self.quota.admit(env.now, tokens, call.input_tokens)
        ):
            call.quota_tokens = tokens
        elif not self.admit(call, charge):  # per-model quotas, or a 429 (Retry-After set)
            call.queue = 0.0
            if call.overhead:  # the client sees the 429 after its whole overhead
                left = _INF if give_up_after is None else give_up_after
                return (yield from self._late(call, OUTCOME_RATE_LIMITED, call.overhead, left, ""))
            return self._end(call, OUTCOME_RATE_LIMITED)
        slots = self.slots
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
                if wait_limit is None:
                    yield slot
                else:
                    yield slot | env.timeout(wait_limit)
                    if not slot.triggered:  # cut while still queued: never served
                        call.queue = env.now - call.start
                        if by_queue:
                            call.ended_by = "queue"
                        return self._end(call, OUTCOME_TIMEOUT)
            served_at = env.now
            call.queue = served_at - call.start
            if self.shaped:
                factor, spell = self.stretch()
                ttft, generation = ttft * factor, generation * factor
                if spell and drawn != ERROR and call.spell_u < self.spell_error_rate:
                    drawn = ERROR
            after = 0.0
            if call.overhead:  # the held part delays the first token; the rest comes after
                held = call.overhead * self.overhead_held
                after = call.overhead - held
                ttft += held
            service = ttft if drawn != OK else ttft + generation + stall
            queued = call.queue
            left = _INF if give_up_after is None else give_up_after - queued
            if service_limit is not None and service_limit < left:
                left = service_limit
                call.ended_by = "attempt"  # kept only if this limit cuts the call
            if left < _INF and left <= _SAME_INSTANT * (queued if queued > 1.0 else 1.0):
                # granted its slot at its give-up instant (up to rounding): cut, never served
                return self._end(call, OUTCOME_TIMEOUT)
            if served_at >= start_by:  # picked up too late to finish: refuses to start
                call.ended_by = "admission"
                return self._end(call, OUTCOME_TIMEOUT)
            if service <= left:
                cut_by, call.ended_by = call.ended_by, ""
                yield env.timeout(service)
                if drawn == OK:  # an answer: billed input and output
                    call.ttft = ttft
                    call.billed_input, call.billed_output = call.input_tokens, call.output_tokens
                elif drawn == INVALID:  # junk: billed its input; an error bills nothing
                    call.ttft = ttft
                    call.billed_input = call.input_tokens
                if after > 0.0:  # served: the slot is free, the caller sees it `after` later
                    released = True
                    slots.release()
                    left -= service
                    return (yield from self._late(call, _DRAWN[drawn], after, left, cut_by))
                # its end (as `_end`, written out: nearly every call ends here)
                call.end, call.outcome = env.now, _DRAWN[drawn]
                serving = self.serving[call.model]
                call.cost = (
                    call.billed_input * serving.price_input
                    + call.billed_output * serving.price_output
                )
                return call
            yield env.timeout(left)
            self._bill_cut(call, drawn, ttft, generation + stall, env.now - served_at)
            return self._end(call, OUTCOME_TIMEOUT)
        except simpy.Interrupt as stop:
            call.ended_by = str(stop.cause)
            if math.isnan(served_at) or env.now == served_at:  # never served for any time
                call.queue = env.now - call.start
            else:
                self._bill_cut(call, drawn, ttft, generation + stall, env.now - served_at)
            return self._end(call, OUTCOME_CANCELLED)
        finally:
            if released:
                pass
            elif slot is None or slot.triggered:  # held a slot (or was just granted one)
                slots.release()
            else:  # still queued: leave the queue, so it never takes a slot later
                slots.cancel(slot)

    def _late(
        self, call: Call, outcome: str, delay: float, left: float, cut_by: str
    ) -> Generator[simpy.Event, Any, Call]:
        """The end of a call the caller sees `delay` seconds (client overhead) after the
        provider is done with it: `outcome` then; a timeout (`ended_by` `cut_by`) if the
        client's cut, `left` seconds away, comes first; cancelled if interrupted. Billed as the
        provider billed it."""
        env = self.env
        try:
            if delay <= left:
                yield env.timeout(delay)
            else:
                yield env.timeout(max(left, 0.0))
                outcome, call.ended_by = OUTCOME_TIMEOUT, cut_by
        except simpy.Interrupt as stop:
            outcome, call.ended_by = OUTCOME_CANCELLED, str(stop.cause)
        return self._end(call, outcome)

    def _end(self, call: Call, outcome: str) -> Call:
        call.end = self.env.now
        call.outcome = outcome
        serving = self.serving[call.model]
        call.cost = (
            call.billed_input * serving.price_input + call.billed_output * serving.price_output
        )
        return call

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


def _quota(limits: ProviderSpec | ServingSpec, provider: ProviderSpec) -> Quota:
    """The quota of one scope (the provider, or one model on it), with the provider's window
    and start rules."""
    return Quota(
        limits.tpm,
        limits.rpm,
        input_tpm=limits.input_tpm,
        output_tpm=limits.output_tpm,
        window=provider.window,
        start=provider.start,
    )
