"""The virtual loop: asyncio's timers and the simpy events share one simulated clock, a
thread's work takes no simulated time, and waiting on nothing simulated is an error."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sim.engine.kernel import Environment
from sim.harness.clock import WALL_EPOCH, StuckError, run_simulated


def test_asyncio_timers_and_simpy_events_interleave_on_one_clock() -> None:
    env = Environment()
    seen: list[tuple[str, float]] = []

    def served(env: Environment) -> Any:
        yield env.timeout(5.0)
        seen.append(("simpy", env.now))

    env.process(served(env))

    async def main() -> float:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3.0)
        seen.append(("asyncio", loop.time()))
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(10.0):
                await asyncio.sleep(100.0)
        seen.append(("timeout", loop.time()))
        return time.time()

    began = time.perf_counter()
    wall = run_simulated(env, main())
    assert seen == [("asyncio", 3.0), ("simpy", 5.0), ("timeout", 13.0)]
    assert wall == WALL_EPOCH + 13.0  # time.time() read the simulated clock meanwhile
    assert time.perf_counter() - began < 100.0  # 113 simulated seconds passed, not real ones


def test_a_thread_computes_in_no_simulated_time() -> None:
    env = Environment()

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        asyncio.get_running_loop().call_later(50.0, lambda: None)  # a timer that could jump
        before = loop.time()
        await loop.run_in_executor(None, time.sleep, 0.05)
        return before, loop.time()

    before, after = run_simulated(env, main())
    assert before == after == 0.0


def test_waiting_on_nothing_simulated_is_an_error_not_a_hang() -> None:
    env = Environment()

    async def main() -> None:
        asyncio.get_running_loop().clock.real_wait_s = 0.01  # type: ignore[attr-defined]
        await asyncio.get_running_loop().create_future()

    with pytest.raises(StuckError, match="outside the simulation"):
        run_simulated(env, main())
