"""An asyncio event loop on the simulation's clock, so client code sleeps in simulated time.

Why a loop of our own rather than looptime or aiotools' VirtualClock: those advance a fake clock
to the loop's own next timer, but here time must also stop at every event of the simpy
environment that serves the calls (a slot freed, an answer done), which the asyncio loop does
not see. `SimulatedSelector` does that in the one place the loop waits: asked to wait up to
`timeout` seconds, it runs the simpy events due by then, one at a time, and otherwise moves
both clocks forward by `timeout` at once. `VirtualLoop.time()` is the simpy environment's now.
"""

from __future__ import annotations

import asyncio
import math
import selectors
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

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        """Events ready now; else run the simpy event due first, or move time `timeout` on."""
        ready = super().select(0)
        if ready or (timeout == 0 and self.env.peek() > self.env.now):
            return ready
        env = self.env
        target = env.now + (math.inf if timeout is None else timeout)
        due = env.peek()
        if due <= target:
            env.step()
            env.now = env._now
            return []
        if math.isfinite(target):
            env._now = env.now = target
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
        super().__init__(SimulatedSelector(env))
        self.env = env

    def time(self) -> float:
        """The simulated time: what every asyncio timer is scheduled against."""
        return self.env.now


def run_simulated(env: Environment, main: Any) -> Any:
    """Run coroutine `main` to its end on a fresh `VirtualLoop` over `env`, then close it."""
    loop = VirtualLoop(env)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
