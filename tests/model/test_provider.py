"""sim.engine.event_calls.serve: a call's life on a tiny simpy environment (slots, 429s, cuts,
cancels, bills)."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from sim.engine.event_calls import serve
from sim.engine.kernel import Environment, Slots
from sim.engine.provider import Provider, Serving
from sim.model.config import ProviderSpec
from sim.model.latency import ERROR, INVALID, OK, CallLatency, Constant
from sim.model.rows import Call

PRICE_IN, PRICE_OUT = 1e-6, 2e-6  # USD per token
IN_TOKENS, OUT_TOKENS = 1000, 100
FULL_COST = IN_TOKENS * PRICE_IN + OUT_TOKENS * PRICE_OUT
INPUT_COST = IN_TOKENS * PRICE_IN


class Bench:
    """One provider on its own simpy environment, with scripted calls and their results."""

    def __init__(
        self,
        concurrency: int = 1,
        billing: str = "full",
        tpm: int | None = None,
        rpm: int | None = None,
    ) -> None:
        self.env = simpy.Environment()
        spec = ProviderSpec.model_validate(
            {
                "concurrency": concurrency,
                "tpm": tpm,
                "rpm": rpm,
                "serves": {
                    "m": {
                        "ttft_s": {"dist": "constant", "value": 1},
                        "tokens_per_s": {"dist": "constant", "value": 1},
                    }
                },
            }
        )
        latency = CallLatency(Constant(1.0), Constant(1.0), 0.0, None, 0.0, 0.0)
        self.provider = Provider(
            self.env, "p", spec, {"m": Serving(latency, PRICE_IN, PRICE_OUT)}, billing
        )
        self.calls: dict[str, Call] = {}
        self.processes: dict[str, simpy.Process] = {}

    def send(
        self,
        name: str,
        at: float = 0.0,
        ttft: float = 1.0,
        generation: float = 4.0,
        stall: float = 0.0,
        drawn: int = OK,
        give_up_after: float | None = None,
    ) -> None:
        """Send call `name` at time `at` with the given draws."""

        def life() -> Generator[simpy.Event, Any, None]:
            yield self.env.timeout(at)
            call = Call(None, name, 0, "p", "m", self.env.now, IN_TOKENS, OUT_TOKENS)
            self.calls[name] = call
            yield from serve(self.provider, call, ttft, generation, stall, drawn, give_up_after)

        self.processes[name] = self.env.process(life())

    def interrupt(self, name: str, at: float) -> None:
        """Interrupt call `name` at time `at` (what the engine does to cancel)."""

        def later() -> Generator[simpy.Event, Any, None]:
            yield self.env.timeout(at)
            self.processes[name].interrupt("cancelled")

        self.env.process(later())

    def run(self, until: float = 1000.0) -> dict[str, Call]:
        """Run the environment and return the calls by name."""
        self.env.run(until=until)
        return self.calls


# ----------------------------------------------------------------------------- timing


def test_free_slot_serves_at_once() -> None:
    bench = Bench(concurrency=2)
    bench.send("a", at=3.0, ttft=1.5, generation=4.0, stall=2.0)
    call = bench.run()["a"]
    assert (call.start, call.queue, call.ttft, call.end, call.outcome) == (
        3.0,
        0.0,
        1.5,
        10.5,
        "ok",
    )


def test_second_call_waits_exactly_the_first_service() -> None:
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=4.0)  # service 5
    bench.send("b", at=2.0, ttft=1.0, generation=2.0)  # service 3
    calls = bench.run()
    assert calls["a"].end == 5.0
    assert calls["b"].queue == 3.0  # queued from 2 until 5
    assert calls["b"].end == 8.0
    assert calls["b"].outcome == "ok"


def test_queue_is_first_come_first_served() -> None:
    bench = Bench(concurrency=2)
    for k, name in enumerate("abcde"):
        bench.send(name, at=0.1 * k, ttft=1.0, generation=1.0)  # service 2 each
    calls = bench.run()
    ends = {name: round(c.end, 9) for name, c in calls.items()}
    assert ends == {"a": 2.0, "b": 2.1, "c": 4.0, "d": 4.1, "e": 6.0}


def test_concurrency_caps_calls_in_service() -> None:
    bench = Bench(concurrency=3)
    for k in range(10):
        bench.send(f"c{k}", at=0.0, ttft=1.0, generation=0.0)
    calls = bench.run()
    served = sorted(c.start + c.queue for c in calls.values())
    assert served == [0.0] * 3 + [1.0] * 3 + [2.0] * 3 + [3.0]


def test_interrupted_call_frees_its_slot_at_once() -> None:
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=9.0)  # would end at 10
    bench.send("b", at=1.0, ttft=1.0, generation=1.0)
    bench.interrupt("a", at=3.0)
    calls = bench.run()
    assert (calls["a"].end, calls["a"].outcome) == (3.0, "cancelled")
    assert calls["b"].queue == 2.0  # served at 3.0, the interrupt time
    assert calls["b"].end == 5.0
    assert bench.provider.slots.count == 0


def test_interrupted_while_queued_leaves_queue_and_costs_nothing() -> None:
    bench = Bench(concurrency=1, billing="full")
    bench.send("a", at=0.0, ttft=1.0, generation=9.0)
    bench.send("b", at=1.0)
    bench.interrupt("b", at=2.5)
    calls = bench.run()
    b = calls["b"]
    assert (b.outcome, b.end, b.queue) == ("cancelled", 2.5, 1.5)
    assert (b.billed_input, b.billed_output, b.cost) == (0, 0, 0.0)
    assert math.isnan(b.ttft)


def test_interrupted_while_queued_does_not_take_a_slot_later() -> None:
    """A cancelled queued call must not be granted the next free slot (and keep it forever)."""
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=9.0)  # holds the slot until 10
    bench.send("b", at=1.0)  # queued, then cancelled at 2
    bench.interrupt("b", at=2.0)
    bench.send("c", at=3.0, ttft=1.0, generation=1.0)  # queued behind a only
    calls = bench.run(until=2.5)
    assert calls["b"].outcome == "cancelled"
    assert len(bench.provider.slots.queue) == 0, "b's slot request is still queued"
    calls = bench.run()
    assert "c" in calls
    assert calls["c"].outcome == "ok", "c was never served: b's dropped request took the slot"
    assert calls["c"].queue == 7.0
    assert bench.provider.slots.count == 0


def test_give_up_while_queued_does_not_take_a_slot_later() -> None:
    """A call cut while queued (give_up_after) must leave the queue for good."""
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=9.0)  # holds the slot until 10
    bench.send("b", at=0.0, give_up_after=2.0)  # queued, gives up at 2
    bench.send("c", at=3.0, ttft=1.0, generation=1.0)
    calls = bench.run(until=2.5)
    assert calls["b"].outcome == "timeout"
    assert len(bench.provider.slots.queue) == 0, "b's slot request is still queued"
    calls = bench.run()
    assert calls["c"].outcome == "ok", "c was never served: b's dropped request took the slot"
    assert (calls["c"].queue, calls["c"].end) == (7.0, 12.0)
    assert bench.provider.slots.count == 0


# ----------------------------------------------------------------------------- outcomes and bills


def test_ok_bills_input_and_output() -> None:
    bench = Bench()
    bench.send("a", ttft=1.0, generation=4.0, drawn=OK)
    call = bench.run()["a"]
    assert (call.outcome, call.billed_input, call.billed_output) == ("ok", IN_TOKENS, OUT_TOKENS)
    assert call.cost == pytest.approx(FULL_COST, rel=1e-12)


def test_invalid_ends_at_first_token_and_bills_input() -> None:
    bench = Bench()
    bench.send("a", at=2.0, ttft=1.5, generation=4.0, drawn=INVALID)
    call = bench.run()["a"]
    assert (call.outcome, call.end, call.ttft) == ("invalid", 3.5, 1.5)
    assert (call.billed_input, call.billed_output) == (IN_TOKENS, 0)
    assert call.cost == pytest.approx(INPUT_COST, rel=1e-12)


def test_error_ends_at_first_token_and_bills_nothing() -> None:
    bench = Bench()
    bench.send("a", at=2.0, ttft=1.5, generation=4.0, drawn=ERROR)
    call = bench.run()["a"]
    assert (call.outcome, call.end, call.cost) == ("error", 3.5, 0.0)
    assert (call.billed_input, call.billed_output) == (0, 0)
    assert math.isnan(call.ttft)  # no first token of an error


# generation 4 s for 100 tokens after a 1 s first token; stopped 3 s into service:
# 2 s of 4 generated = 50 tokens.
@pytest.mark.parametrize(
    ("billing", "billed_output"),
    [("full", OUT_TOKENS), ("elapsed", OUT_TOKENS // 2), ("none", None)],
)
@pytest.mark.parametrize("how", ["cut", "cancelled"])
def test_stopped_call_billing(billing: str, billed_output: int | None, how: str) -> None:
    bench = Bench(billing=billing)
    if how == "cut":
        bench.send("a", at=1.0, ttft=1.0, generation=4.0, give_up_after=3.0)
    else:
        bench.send("a", at=1.0, ttft=1.0, generation=4.0)
        bench.interrupt("a", at=4.0)
    call = bench.run()["a"]
    assert call.outcome == ("timeout" if how == "cut" else "cancelled")
    assert call.end == 4.0
    if billed_output is None:
        assert (call.billed_input, call.billed_output, call.cost) == (0, 0, 0.0)
    else:
        assert (call.billed_input, call.billed_output) == (IN_TOKENS, billed_output)
        expected = IN_TOKENS * PRICE_IN + billed_output * PRICE_OUT
        assert call.cost == pytest.approx(expected, rel=1e-12)


def test_elapsed_billing_counts_from_the_slot_not_the_send() -> None:
    bench = Bench(concurrency=1, billing="elapsed")
    bench.send("a", at=0.0, ttft=1.0, generation=1.0)  # holds the slot until 2
    bench.send("b", at=0.0, ttft=1.0, generation=4.0, give_up_after=4.0)  # served 2..4
    b = bench.run()["b"]
    assert (b.queue, b.end, b.outcome) == (2.0, 4.0, "timeout")
    # 2 s of service = 1 s of first token + 1 s of 4 s generation: a quarter of 100 tokens
    assert (b.billed_input, b.billed_output) == (IN_TOKENS, 25)


def test_elapsed_billing_before_first_token_bills_input_only() -> None:
    bench = Bench(billing="elapsed")
    bench.send("a", ttft=2.0, generation=4.0, give_up_after=1.5)
    call = bench.run()["a"]
    assert (call.outcome, call.end) == ("timeout", 1.5)
    assert (call.billed_input, call.billed_output) == (IN_TOKENS, 0)


def test_elapsed_billing_counts_a_stall_as_generation_time() -> None:
    bench = Bench(billing="elapsed")
    # 1 s first token, then 2 s generation + 6 s stall = 8 s; cut 5 s in: 4 of 8 s done
    bench.send("a", ttft=1.0, generation=2.0, stall=6.0, give_up_after=5.0)
    call = bench.run()["a"]
    assert (call.billed_input, call.billed_output) == (IN_TOKENS, 50)


def test_cut_junk_and_errors_bill_like_their_outcome() -> None:
    bench = Bench(billing="full")
    bench.send("junk", ttft=5.0, drawn=INVALID, give_up_after=2.0)
    bench.send("err", ttft=5.0, drawn=ERROR, give_up_after=2.0)
    calls = bench.run()
    assert calls["junk"].outcome == calls["err"].outcome == "timeout"
    assert (calls["junk"].billed_input, calls["junk"].billed_output) == (IN_TOKENS, 0)
    assert calls["err"].cost == 0.0


def test_call_finishing_before_give_up_is_not_cut() -> None:
    bench = Bench()
    bench.send("a", ttft=1.0, generation=2.0, give_up_after=3.5)
    call = bench.run()["a"]
    assert (call.outcome, call.end) == ("ok", 3.0)


# ----------------------------------------------------------------------------- 429 and give-up


def test_rate_limited_call_ends_at_start_and_costs_nothing() -> None:
    bench = Bench(concurrency=10, tpm=1500)  # one 1100-token call fits, two do not
    bench.send("a", at=1.0)
    bench.send("b", at=1.0)
    calls = bench.run()
    assert calls["a"].outcome == "ok"
    b = calls["b"]
    assert (b.outcome, b.start, b.end, b.queue, b.cost) == ("rate_limited", 1.0, 1.0, 0.0, 0.0)
    assert (b.billed_input, b.billed_output) == (0, 0)
    assert bench.provider.slots.count == 0


def test_rpm_limit_rate_limits() -> None:
    bench = Bench(concurrency=10, rpm=2)
    for name in "abc":
        bench.send(name, at=0.0)
    bench.send("d", at=30.0)  # one request refilled after 30 s
    calls = bench.run()
    assert [calls[n].outcome for n in "abcd"] == ["ok", "ok", "rate_limited", "ok"]


def test_cancelled_call_still_counts_against_quota() -> None:
    bench = Bench(concurrency=10, tpm=2400)  # two calls of 1100 tokens
    bench.send("a", at=0.0)
    bench.interrupt("a", at=0.5)
    bench.send("b", at=1.0)
    bench.send("c", at=1.0)
    calls = bench.run()
    assert calls["a"].outcome == "cancelled"
    assert calls["b"].outcome == "ok"
    # tokens left at 1 s: 2400 - 2 * 1100 + 1 s * 40/s = 240 < 1100
    assert calls["c"].outcome == "rate_limited"


def test_give_up_cuts_a_queued_call() -> None:
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=9.0)
    bench.send("b", at=1.0, give_up_after=4.0)
    calls = bench.run()
    b = calls["b"]
    assert (b.outcome, b.end, b.queue, b.cost) == ("timeout", 5.0, 4.0, 0.0)
    assert math.isnan(b.ttft)


def test_give_up_counts_queue_time() -> None:
    bench = Bench(concurrency=1)
    bench.send("a", at=0.0, ttft=1.0, generation=2.0)  # slot until 3
    bench.send("b", at=0.0, ttft=1.0, generation=4.0, give_up_after=5.0)  # served 3, cut at 5
    b = bench.run()["b"]
    assert (b.queue, b.end, b.outcome) == (3.0, 5.0, "timeout")


# --------------------------------------------------------------------------- slots vs simpy


class _ResourceSlots:
    """`simpy.Resource` behind the `Slots` interface: the reference `Slots` must match."""

    def __init__(self, env: simpy.Environment, capacity: int) -> None:
        self.resource = simpy.Resource(env, capacity=capacity)
        self.held: dict[int, simpy.Event] = {}

    def get(self, pid: int) -> tuple[simpy.Event, bool]:
        request = self.resource.request()
        self.held[pid] = request
        return request, request.triggered

    def release(self, pid: int) -> None:
        self.resource.release(self.held.pop(pid))

    def cancel(self, pid: int) -> None:
        self.held.pop(pid).cancel()


class _PoolSlots:
    """`sim.engine.kernel.Slots` behind the same interface."""

    def __init__(self, env: simpy.Environment, capacity: int) -> None:
        self.slots = Slots(env, capacity)
        self.waiting: dict[int, simpy.Event] = {}

    def get(self, pid: int) -> tuple[simpy.Event | None, bool]:
        if self.slots.take():
            return None, True
        event = self.slots.wait()
        self.waiting[pid] = event
        return event, event.triggered

    def release(self, pid: int) -> None:
        self.waiting.pop(pid, None)
        self.slots.release()

    def cancel(self, pid: int) -> None:
        self.slots.cancel(self.waiting.pop(pid))


def _slot_log(pool_kind: str, env: simpy.Environment, seed: int) -> list[tuple]:
    """Calls at whole seconds (so many share an instant) on 3 slots: some give up queueing,
    some are interrupted; every grant, release and give-up is logged in event order."""
    rng = np.random.default_rng(seed)
    pool: Any = (_ResourceSlots if pool_kind == "resource" else _PoolSlots)(env, 3)
    log: list[tuple] = []
    processes: dict[int, simpy.Process] = {}

    def call(pid: int, hold: float, patience: float | None) -> Generator[simpy.Event, Any, None]:
        event, granted = pool.get(pid)
        try:
            if not granted:
                if patience is None:
                    yield event
                else:
                    yield event | env.timeout(patience)
                    if not event.triggered:
                        log.append((env.now, pid, "gave up"))
                        pool.cancel(pid)
                        return
            log.append((env.now, pid, "granted"))
            yield env.timeout(hold)
        except simpy.Interrupt:
            log.append((env.now, pid, "interrupted"))
            if event is not None and not event.triggered:
                pool.cancel(pid)
                return
        log.append((env.now, pid, "released"))
        pool.release(pid)

    def source() -> Generator[simpy.Event, Any, None]:
        for pid in range(400):
            yield env.timeout(float(rng.integers(0, 2)))
            patience = float(rng.integers(0, 4)) if rng.random() < 0.3 else None
            processes[pid] = env.process(call(pid, float(rng.integers(0, 5)), patience))
            if rng.random() < 0.2:
                victim = processes[int(rng.integers(0, pid + 1))]
                if victim.is_alive:
                    victim.interrupt("cancelled")

    env.process(source())
    env.run()
    return log


@pytest.mark.parametrize("seed", range(12))
def test_slots_grant_as_simpy_resource_does(seed: int) -> None:
    """`Slots` (wake-ups left out in a tracking `Environment`, or all kept in a plain one)
    grants, in the same event order, exactly what `simpy.Resource` grants."""
    reference = _slot_log("resource", simpy.Environment(), seed)
    assert any(kind == "gave up" for _, _, kind in reference)
    assert _slot_log("pool", Environment(), seed) == reference
    assert _slot_log("pool", simpy.Environment(), seed) == reference


def _same_instant_log(pool_kind: str, env: simpy.Environment) -> list[tuple]:
    """Two slots. At t=5: A frees its slot (nobody queued: the wake-up that is left out), X
    takes it and frees it again at once, C queues, B frees its slot. simpy's `Release` of A then
    grants C before X's next event at that instant; a pool that dropped that wake-up for good
    would grant C only at B's wake-up, after it."""
    pool: Any = (_ResourceSlots if pool_kind == "resource" else _PoolSlots)(env, 2)
    log: list[tuple] = []

    def holder(pid: int, *holds: float) -> Generator[simpy.Event, Any, None]:
        pool.get(pid)
        for hold in holds:
            yield env.timeout(hold)
        pool.release(pid)
        log.append((env.now, pid, "released"))

    def taker(pid: int) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(5)
        event, granted = pool.get(pid)
        if not granted:
            yield event
        log.append((env.now, pid, "granted"))
        yield env.timeout(0)
        pool.release(pid)
        log.append((env.now, pid, "released"))
        yield env.timeout(0)
        log.append((env.now, pid, "after"))

    env.process(holder(0, 5))  # A
    env.process(holder(1, 2, 3))  # B: its release comes up after X's and C's events
    env.process(taker(2))  # X
    env.process(taker(3))  # C
    env.run()
    return log


def test_slots_put_back_a_left_out_wake_up_that_is_still_due() -> None:
    reference = _same_instant_log("resource", simpy.Environment())
    assert reference.index((5, 3, "granted")) < reference.index((5, 2, "after"))
    assert _same_instant_log("pool", Environment()) == reference
    assert _same_instant_log("pool", simpy.Environment()) == reference


def _passed_wake_up_log(pool_kind: str, env: simpy.Environment) -> list[tuple]:
    """Two slots. At t=5, A frees its slot (nobody queued) and, one event later (so the left-out
    wake-up is already past), takes it back, queues a request and interrupts B, which frees the
    other slot. simpy grants the request at B's wake-up, after a tick scheduled in between has
    run twice; a pool that put back the past wake-up would grant it before the second tick."""
    pool: Any = (_ResourceSlots if pool_kind == "resource" else _PoolSlots)(env, 2)
    log: list[tuple] = []

    def tick(_: simpy.Event) -> None:
        log.append((env.now, "tick"))
        env.timeout(0).callbacks.append(lambda _: log.append((env.now, "tick 2")))

    def a(b: simpy.Process) -> Generator[simpy.Event, Any, None]:
        pool.get(0)
        yield env.timeout(5)
        pool.release(0)
        yield env.timeout(0)
        pool.get(10)
        event, granted = pool.get(11)
        assert not granted
        env.timeout(0).callbacks.append(tick)
        b.interrupt()
        yield event
        log.append((env.now, "granted"))

    def b() -> Generator[simpy.Event, Any, None]:
        pool.get(1)
        try:
            yield env.timeout(100)
        except simpy.Interrupt:
            pool.release(1)
            log.append((env.now, "b released"))

    env.process(a(env.process(b())))
    env.run()
    return log


def test_slots_never_put_back_a_wake_up_already_past() -> None:
    reference = _passed_wake_up_log("resource", simpy.Environment())
    assert reference.index((5, "tick 2")) < reference.index((5, "granted"))
    assert _passed_wake_up_log("pool", Environment()) == reference
    assert _passed_wake_up_log("pool", simpy.Environment()) == reference


def test_environment_inlined_timeout_and_process_match_simpy() -> None:
    """`Environment.timeout` and `.process` write simpy's constructors out for speed: the events
    they make have simpy's fields and queue entries, and the clock (`now`) follows simpy's."""

    def ours_and_simpys(env: simpy.Environment) -> list[Any]:
        def sleeper() -> Generator[simpy.Event, Any, str]:
            yield env.timeout(1.5, value="v")
            return "done"

        timeout = env.timeout(2.0, "x")
        process = env.process(sleeper())
        entries = [(t, p, i, type(e).__name__) for t, p, i, e in sorted(env._queue)]
        fields = [sorted(vars(e)) for e in (timeout, process, process._target)]
        values = [(timeout._delay, timeout._value, timeout._ok), (process._target._value,)]
        env.run()
        return [entries, fields, values, process.value, env.now]

    assert ours_and_simpys(Environment()) == ours_and_simpys(simpy.Environment())
    with pytest.raises(ValueError, match="Negative delay"):
        Environment().timeout(-1.0)
