"""sim.engine.kernel against simpy: what the kernel relies on of simpy's insides, pinned.

The kernel writes out simpy's `timeout`, `process`, `step` and `run`, reserves event ids and puts
wake-ups back at their place in the queue. That is right only while simpy's queue entries are
(time, priority, id, event), URGENT comes before NORMAL, a process starts on an URGENT
`Initialize`, every event id comes from one counter, a process is resumed as a callback of the
event it waits on, an interrupt is an URGENT event delivered through that callback, and a
timeout has exactly the fields the kernel sets. Each of those is a test here; and the simpy
functions the kernel copies or reaches into are pinned by their source, so a simpy upgrade that
touches any of them fails here, naming what to re-check, before a number can move. The last
two tests hold the boundary: no other module of sim/ reaches into simpy, and the model layer
does not mention it at all.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
from simpy import core, events
from simpy.core import BoundClass
from simpy.events import NORMAL, URGENT

from sim.engine.kernel import Environment, Slots

#: sha256 (first 16 hex digits) of the source of every simpy function the kernel writes out or
#: whose insides it relies on, as in simpy 4.1.2. A mismatch means simpy changed one of them:
#: compare it with its copy in sim/engine/kernel.py (and the tests below), then update the hash.
SIMPY_SOURCES = {
    "Environment.__init__": (core.Environment.__init__, "1424f6ad2e4e8742"),
    "Environment.schedule": (core.Environment.schedule, "d77e268cd77bd921"),
    "Environment.step": (core.Environment.step, "8fea2b488c8ad7fa"),
    "Timeout.__init__": (events.Timeout.__init__, "321c9947d58d38ec"),
    "Initialize.__init__": (events.Initialize.__init__, "b6aacbc4b5d31b68"),
    "Process.__init__": (events.Process.__init__, "d3156d764d5bbc72"),
    "Process._resume": (events.Process._resume, "7c85b9fe960e6b8e"),
    "Interruption.__init__": (events.Interruption.__init__, "f81d925d130e6154"),
    "Interruption._interrupt": (events.Interruption._interrupt, "65f1531c0f18f7b6"),
    "Event.succeed": (events.Event.succeed, "d859345dcf4f537a"),
}


@pytest.mark.parametrize("name", sorted(SIMPY_SOURCES))
def test_simpy_functions_the_kernel_relies_on_are_unchanged(name: str) -> None:
    function, expected = SIMPY_SOURCES[name]
    digest = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]
    assert digest == expected, (
        f"simpy's {name} changed (simpy {simpy.__version__}): sim/engine/kernel.py copies or "
        "relies on it; re-check the kernel against the new code, then update SIMPY_SOURCES"
    )


def test_priorities_order_urgent_before_normal() -> None:
    assert (URGENT, NORMAL) == (0, 1)


def test_a_queue_entry_is_time_priority_id_event() -> None:
    env = simpy.Environment()
    timeout = env.timeout(2.5, "v")
    assert env._queue == [(2.5, NORMAL, 0, timeout)]


def test_every_event_id_comes_from_one_counter() -> None:
    """Timeouts, triggered events, a process's `Initialize` and an interrupt all take the next
    id of `env._eid`, which the kernel's `ids` is (a reserved id keeps a place in that order)."""
    env = simpy.Environment()

    def sleeper() -> Generator[simpy.Event, Any, None]:
        try:
            yield env.timeout(10)
        except simpy.Interrupt:
            return

    timeout = env.timeout(1)
    event = env.event().succeed()
    process = env.process(sleeper())
    env.step()  # the process starts (Initialize) and waits on its timeout (id 3)
    process.interrupt("stop")
    entries = sorted((i, p, type(e).__name__) for _, p, i, e in env._queue)
    assert entries == [
        (0, NORMAL, "Timeout"),
        (1, NORMAL, "Event"),
        (3, NORMAL, "Timeout"),
        (4, URGENT, "Interruption"),
    ]
    assert next(env._eid) == 5
    assert event.triggered
    assert timeout.env is env
    kernel = Environment()
    assert kernel.ids is kernel._eid


def test_a_process_starts_on_an_urgent_initialize_that_resumes_it() -> None:
    env = simpy.Environment()
    env.timeout(0)  # a NORMAL event at the same instant, scheduled first

    def body() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1)

    process = env.process(body())
    start = process._target
    assert type(start) is events.Initialize
    assert start.callbacks == [process._resume]
    assert (start._value, start._ok) == (None, True)
    assert min(env._queue)[1:] == (URGENT, 1, start)  # before the earlier NORMAL one


def test_a_process_is_resumed_as_a_callback_of_the_event_it_waits_on() -> None:
    env = simpy.Environment()
    seen: list[Any] = []

    def body() -> Generator[simpy.Event, Any, str]:
        seen.append(env.active_process)
        value = yield env.timeout(1, "one")
        seen.append((value, env.active_process))
        return "done"

    process = env.process(body())
    env.step()  # Initialize: the body runs to its first yield
    waited = process._target
    assert type(waited) is events.Timeout
    assert waited.callbacks == [process._resume]
    assert env.active_process is None  # only while a process runs
    env.run()
    assert seen == [process, ("one", process)]
    assert (process._ok, process._value) == (True, "done")


def test_an_interrupt_is_an_urgent_event_delivered_through_the_resume_callback() -> None:
    env = simpy.Environment()
    log: list[tuple[float, str]] = []

    def sleeper() -> Generator[simpy.Event, Any, None]:
        try:
            yield env.timeout(10)
        except simpy.Interrupt as stop:
            log.append((env.now, f"interrupted: {stop.cause}"))

    def interrupter(victim: simpy.Process) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(2)
        assert process_resume_in(victim._target, victim)  # still waiting until delivery
        victim.interrupt("deadline")
        interruption = max(env._queue, key=lambda entry: entry[2])
        assert interruption[:2] == (2, URGENT)
        assert type(interruption[3]) is events.Interruption
        assert (interruption[3]._ok, interruption[3]._defused) == (False, True)

    def other() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(2)  # due at 2 with a lower id than the interrupt
        log.append((env.now, "other"))

    victim = env.process(sleeper())
    env.process(interrupter(victim))
    env.process(other())
    env.run()
    assert log == [(2, "interrupted: deadline"), (2, "other")]


def process_resume_in(event: simpy.Event, process: simpy.Process) -> bool:
    return event.callbacks is not None and process._resume in event.callbacks


def test_delivering_an_interrupt_removes_the_resume_from_the_waited_event() -> None:
    env = simpy.Environment()

    def sleeper() -> Generator[simpy.Event, Any, None]:
        try:
            yield timeout
        except simpy.Interrupt:
            return

    timeout = env.timeout(5)
    victim = env.process(sleeper())
    env.step()  # started, waiting on `timeout`
    assert process_resume_in(timeout, victim)
    victim.interrupt()
    env.step()  # the interruption
    assert not process_resume_in(timeout, victim)


@pytest.mark.parametrize("make", [Environment, simpy.Environment])
def test_a_timeout_and_a_process_have_the_fields_the_kernel_sets(
    make: Callable[[], simpy.Environment],
) -> None:
    """`Environment.timeout` and `.process` set exactly these fields, as simpy's constructors do."""
    env = make()

    def body() -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1)

    timeout = env.timeout(1.5, "x")
    process = env.process(body())
    assert sorted(vars(timeout)) == ["_delay", "_ok", "_value", "callbacks", "env"]
    assert (timeout._delay, timeout._value, timeout._ok, timeout.callbacks) == (1.5, "x", True, [])
    assert sorted(vars(process)) == ["_generator", "_target", "callbacks", "env"]
    assert sorted(vars(process._target)) == ["_ok", "_value", "callbacks", "env"]


def test_simpy_binds_exactly_these_classes_to_its_environment() -> None:
    """The kernel binds simpy.Environment's BoundClass attributes to itself (simpy binds only
    its own class's): these are the ones."""
    bound = {n for n, a in vars(simpy.Environment).items() if isinstance(a, BoundClass)}
    assert bound == {"event", "process", "timeout", "all_of", "any_of"}
    env = Environment()
    assert bound <= set(vars(env))
    assert env.timeout.__func__ is Environment.timeout  # type: ignore[attr-defined]


def test_simpy_steps_an_event_that_has_only_callbacks_and_ok() -> None:
    """A slot's wake-up has no event behind it: simpy's own `step` reads only its callbacks and
    `_ok` (a plain simpy environment schedules it as it is)."""
    env = simpy.Environment()
    slots = Slots(env, 1)
    assert slots.take()
    waiting = slots.wait()
    slots.release()  # nobody left out in a plain environment: the wake-up is scheduled
    (entry,) = env._queue
    assert type(entry[3]).__name__ == "_Wake"
    assert entry[:3] == (0, NORMAL, 0)
    env.step()
    assert waiting.triggered
    assert slots.count == 1


@pytest.mark.parametrize("make", [Environment, simpy.Environment])
def test_a_failed_event_nobody_defused_crashes_as_in_simpy(
    make: Callable[[], simpy.Environment],
) -> None:
    env = make()
    env.event().fail(KeyError("lost"))
    with pytest.raises(KeyError) as crash:
        env.run()
    assert isinstance(crash.value.__cause__, KeyError)
    env = make()
    failed = env.event().fail(KeyError("lost"))
    failed.defused = True
    env.run()  # defused: no crash


def _workload(env: simpy.Environment, seed: int) -> tuple[list[tuple], int]:
    """Processes that sleep, race a timeout against an event, interrupt one another, fail and
    catch failures, at whole seconds (so many share an instant); every resume logged."""
    rng = np.random.default_rng(seed)
    log: list[tuple] = []
    processes: list[simpy.Process] = []
    signals: list[simpy.Event] = []

    def worker(pid: int) -> Generator[simpy.Event, Any, int]:
        for k in range(int(rng.integers(1, 5))):
            try:
                choice = rng.random()
                if choice < 0.4:
                    value = yield env.timeout(float(rng.integers(0, 3)), k)
                    log.append((env.now, pid, "slept", value))
                elif choice < 0.7 and signals:
                    signal = signals[int(rng.integers(0, len(signals)))]
                    result = yield signal | env.timeout(float(rng.integers(0, 3)))
                    log.append((env.now, pid, "raced", len(result.todict())))
                elif choice < 0.85:
                    event = env.event()
                    signals.append(event)
                    event.succeed(pid)
                    yield env.timeout(0)
                    log.append((env.now, pid, "signalled"))
                else:
                    failing = env.event()
                    failing.fail(ValueError(pid))
                    failing.defused = True  # no crash if an interrupt comes first
                    try:
                        yield failing
                    except ValueError:
                        log.append((env.now, pid, "caught"))
            except simpy.Interrupt as stop:
                log.append((env.now, pid, "interrupted", stop.cause))
        return pid

    def source() -> Generator[simpy.Event, Any, None]:
        for pid in range(150):
            yield env.timeout(float(rng.integers(0, 2)))
            processes.append(env.process(worker(pid)))
            if rng.random() < 0.3:
                victim = processes[int(rng.integers(0, len(processes)))]
                if victim.is_alive and victim is not env.active_process:
                    victim.interrupt(pid)

    env.process(source())
    env.run()
    return log, next(env._eid)


@pytest.mark.parametrize("seed", range(6))
def test_the_kernel_runs_events_in_simpys_order(seed: int) -> None:
    """The written-out `timeout`, `process`, `run` and `step` (driven by `run_checking`) give
    simpy's event order and use as many event ids."""
    reference = _workload(simpy.Environment(), seed)
    assert any(entry[2] == "interrupted" for entry in reference[0])
    assert _workload(Environment(), seed) == reference
    assert _workload_stepped(seed) == reference


def _workload_stepped(seed: int) -> tuple[list[tuple], int]:
    """The workload on a kernel environment driven one `step` at a time (`run_checking`)."""
    env = Environment()
    original = env.run
    env.run = lambda until=None: env.run_checking(lambda: False, every=7)  # type: ignore[method-assign]
    try:
        return _workload(env, seed)
    finally:
        env.run = original  # type: ignore[method-assign]


def test_run_checking_stops_between_two_events() -> None:
    env = Environment()
    for k in range(10):
        env.timeout(k)
    asked: list[float] = []

    def stop() -> bool:
        asked.append(env.now)
        return len(asked) == 2

    with pytest.raises(KeyboardInterrupt):
        env.run_checking(stop, every=3)
    assert asked == [2, 5]
    assert len(env._queue) == 4


def test_the_kernel_clock_follows_simpys() -> None:
    env = Environment()
    env.timeout(3.25)
    env.run()
    assert env.now == env._now == 3.25
    assert Environment(initial_time=7.0).now == 7.0
    with pytest.raises(ValueError, match="Negative delay"):
        Environment().timeout(-1.0)


SIM = Path(__file__).resolve().parents[2] / "sim"
#: simpy's private attributes the kernel reads or writes (any `._name` of these outside the
#: kernel is a reach into simpy's insides).
SIMPY_PRIVATE = re.compile(
    r"\._(queue|eid|now|value|ok|delay|generator|target|resume|active_proc|defused|interrupt)\b"
)


def test_only_the_kernel_reaches_into_simpy() -> None:
    """simpy's private attributes and its submodules (`simpy.core`, `simpy.events`) appear in
    sim/engine/kernel.py only; everything else uses `simpy.X`, the public API."""
    kernel = SIM / "engine" / "kernel.py"
    assert SIMPY_PRIVATE.search(kernel.read_text())  # the pattern does find the kernel's
    reaches = [
        f"{path.relative_to(SIM.parent)}:{number}: {line.strip()}"
        for path in sorted(SIM.rglob("*.py"))
        if path != kernel
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SIMPY_PRIVATE.search(line) or re.search(r"\bsimpy\.(core|events|resources)\b", line)
    ]
    assert not reaches, "only sim/engine/kernel.py may reach into simpy:\n" + "\n".join(reaches)


def test_the_model_layer_does_not_import_simpy() -> None:
    mentions = [
        str(path.relative_to(SIM.parent))
        for path in sorted((SIM / "model").rglob("*.py"))
        if "simpy" in path.read_text()
    ]
    assert not mentions, f"the model layer must not import (or lean on) simpy: {mentions}"
