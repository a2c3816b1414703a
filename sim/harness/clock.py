"""An asyncio event loop on the simulation's clock, so client code sleeps in simulated time.

Why a loop of our own rather than looptime or aiotools' VirtualClock: those advance a fake clock
to the loop's own next timer, but here time must also stop at every event of the simpy
environment that serves the calls (a slot freed, an answer done), which the asyncio loop does
not see. `SimulatedSelector` does that in the one place the loop waits: asked to wait up to
`timeout` seconds, it runs the simpy events due by then, one at a time, and otherwise moves
both clocks forward by `timeout` at once. `VirtualLoop.time()` is the simpy environment's now.
While work handed to a thread is out, time stands still and the selector waits for it for real.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from typing import Any

from sim.engine.kernel import Environment


class StuckError(RuntimeError):
    """The client code waits on something outside the simulation: nothing can move time."""


class SimulatedSelector(selectors.DefaultSelector):
    """The loop's selector: real file descriptors (the loop's own wake-up pipe) are polled
    without blocking, and waiting means advancing the simulated clock."""

    def __init__(self, env: Environment, real_wait_s: float = 30.0) -> None:
        super().__init__()
        self.env = env
        #: How long (real seconds) to wait for a thread's wake-up when nothing simulated is due.
        self.real_wait_s = real_wait_s
        #: Work handed to threads (`run_in_executor`) not yet back: time stands still meanwhile.
        self.in_threads = 0

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        """Events ready now; else run the simpy event due first, or move time `timeout` on."""
        ready = super().select(0)
        if ready or (timeout == 0 and self.env.peek() > self.env.now):
            return ready
        if self.in_threads:  # a thread computes in no simulated time: wait for it for real
            return super().select(self.real_wait_s if timeout is None else max(timeout, 0.05))
        env = self.env
        target = env.now + (math.inf if timeout is None else timeout)
        due = env.peek()
        if due <= target and due < math.inf:
            env.step()
            return []
        if math.isfinite(target):
            env.advance_to(target)
            return []
        ready = super().select(self.real_wait_s)  # only a thread (run_in_executor) can wake us
        if not ready:
            raise StuckError(
                "the client code is waiting on something outside the simulation (a real "
                "socket, a thread, a future nobody sets): no simulated timer or call is due"
            )
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose `time()` is the simpy environment's clock (seconds)."""

    def __init__(self, env: Environment) -> None:
        self.clock = SimulatedSelector(env)
        super().__init__(self.clock)
        self.env = env

    def time(self) -> float:
        """The simulated time: what every asyncio timer is scheduled against."""
        return self.env.now

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        """The loop's own, counted: while a thread works, simulated time does not move (the
        SDKs hand setup to threads, as LiteLLM's `acompletion` does; it costs no model time)."""
        future = super().run_in_executor(executor, func, *args)
        self.clock.in_threads += 1

        def back(_: asyncio.Future[Any]) -> None:
            self.clock.in_threads -= 1

        future.add_done_callback(back)
        return future


#: The wall-clock time (`time.time()`) of the simulation's start: fixed, so runs repeat.
WALL_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def run_simulated(env: Environment, main: Any) -> Any:
    """Run coroutine `main` to its end on a fresh `VirtualLoop` over `env`, then close it.

    Meanwhile `time.time()` reads the simulated clock too (from `WALL_EPOCH`): clients keep
    cooldowns and windows on the wall clock (LiteLLM's Router: `cooldown_cache.py`), and in
    simulated time they must pass as the simulated seconds do."""
    loop = VirtualLoop(env)
    real_time = time.time
    time.time = lambda: WALL_EPOCH + env.now
    try:
        return loop.run_until_complete(main)
    finally:
        time.time = real_time
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
