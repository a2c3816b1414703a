"""The event kernel: the only module that touches simpy beyond its public API.

The event engine runs on simpy, made faster in two places that must reach inside it. The
`Environment` writes out simpy's `timeout`, `process`, `step` and `run` (the same events, the
same queue entries, the same event ids, so the same event order) and keeps the queue entry it
is processing; `Slots` grants a provider's slots in `simpy.Resource`'s order without its events,
leaving out a wake-up nobody waits for and putting it back, at its reserved place in the order,
if a call queues at that instant. Everything else of the engine uses simpy's public API and the
small methods here. What they rely on of simpy (the queue entry's layout, the priorities, how a
process starts and resumes, an interrupt's delivery, the event ids, a timeout's fields, the
bodies written out here) is pinned by tests/engine/test_kernel.py, so a simpy upgrade that
changes any of it fails there first (hence `simpy>=4.1,<4.2` in pyproject.toml).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import BoundClass, EmptySchedule, EventPriority, StopSimulation
from simpy.events import NORMAL, URGENT, Initialize, Process, Timeout

#: Relative tolerance under which two simulated times are the same instant (float rounding).
SAME_INSTANT = 1e-12
#: An event's bare allocation (its fields are set by `Environment.timeout` and `.process`).
_new_event = object.__new__


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

    def advance_to(self, when: float) -> None:
        """Move the clock on to `when`, with no event due before it (the harness's loop waits
        this way: `sim.harness.clock`)."""
        if when < self._now or self.peek() < when:
            raise ValueError(f"cannot advance from {self._now} to {when} past the next event")
        self._now = self.now = when

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

    def run_checking(self, stop: Callable[[], bool], every: int = 4096) -> None:
        """Run to the end of the schedule, asking `stop` every `every` events; when it says yes,
        raise KeyboardInterrupt between two events (never inside simpy's bookkeeping)."""
        step = self.step
        try:
            while True:
                for _ in range(every):
                    step()
                if stop():
                    raise KeyboardInterrupt
        except EmptySchedule:
            return

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
