"""Load-aware controls: what a client runtime does to keep its own retries from becoming a storm.

One `Controls` per policy's simulation holds state shared by every request of that simulation
(never across policies): a hedge cap (Finagle's backup-request `maxExtraLoad`), a retry budget
(gRPC retry throttling, gRFC A6), a circuit breaker per provider (LiteLLM-style cooldown),
client-side AIMD concurrency per provider, a pause on hedging after 429s or while a provider's
recent 429 share is high, and shedding of runs that cannot make their deadline (or arrive while
the quota is saturated). The engine and the policies call small hooks; everything here
is plain bookkeeping on simulated time, with no randomness of its own.
"""

from __future__ import annotations

import math
from collections import deque

import simpy

from sim.model.config import AimdSpec, BreakerSpec, ControlsSpec, HedgeCapSpec, RetryBudgetSpec
from sim.model.rows import OUTCOME_CANCELLED, OUTCOME_OK, OUTCOME_RATE_LIMITED, Call
from sim.model.workflow import Workflow

#: Outcome of an attempt refused at the client because its provider's breaker is open (no call
#: is made: it is in no calls table; a run it fails has this `fail_reason`).
OUTCOME_BREAKER_OPEN = "breaker_open"
#: `fail_reason` of a run shed at its arrival (it never started a step).
FAIL_SHED = "shed"


class RetryBudget:
    """gRPC retry throttling: `tokens` starts at `max_tokens` and stays in [0, max_tokens]; a
    failed attempt takes 1, a successful one gives `token_ratio`; a retry or hedge may be sent
    only while tokens > max_tokens / 2. Hence retries < max_tokens / 2 + token_ratio x successes
    (each granted retry follows its own failure's decrement while above the threshold)."""

    __slots__ = ("max_tokens", "ratio", "threshold", "tokens")

    def __init__(self, spec: RetryBudgetSpec) -> None:
        self.max_tokens = spec.max_tokens
        self.ratio = spec.token_ratio
        self.threshold = spec.max_tokens / 2
        self.tokens = spec.max_tokens

    def record(self, ok: bool) -> None:
        """Count one attempt's outcome."""
        if ok:
            self.tokens = min(self.max_tokens, self.tokens + self.ratio)
        else:
            self.tokens = max(0.0, self.tokens - 1.0)

    def allows(self) -> bool:
        """True if a retry or hedge may be sent now."""
        return self.tokens > self.threshold


class HedgeCap:
    """Finagle's BackupRequestFilter `maxExtraLoad`: hedges sent in the last `window_s` stay
    within `max_extra` x primary calls sent in it (Finagle: a RetryBudget with that percentage,
    no minimum reserve, deposits expiring after the window)."""

    __slots__ = ("hedges", "max_extra", "primaries", "window_s")

    def __init__(self, spec: HedgeCapSpec) -> None:
        self.max_extra = spec.max_extra
        self.window_s = spec.window_s
        self.primaries: deque[float] = deque()
        self.hedges: deque[float] = deque()

    def _expire(self, now: float) -> None:
        edge = now - self.window_s
        for times in (self.primaries, self.hedges):
            while times and times[0] <= edge:
                times.popleft()

    def primary(self, now: float) -> None:
        """A primary call was sent (a deposit)."""
        self.primaries.append(now)

    def try_hedge(self, now: float) -> bool:
        """Take one hedge if the window allows it (True), else leave the balance alone."""
        self._expire(now)
        if len(self.hedges) + 1 <= self.max_extra * len(self.primaries):
            self.hedges.append(now)
            return True
        return False


class Breaker:
    """One provider's breaker: `failures` counted failures within `window_s` open it for
    `cooldown_s` (LiteLLM's `allowed_fails` / `cooldown_time`); it closes by itself after that,
    with its failure count cleared. `open_s` totals the time it was open."""

    __slots__ = ("counted", "failures", "open_s", "open_until", "spec")

    def __init__(self, spec: BreakerSpec) -> None:
        self.spec = spec
        self.counted = frozenset(spec.count)
        self.failures: deque[float] = deque()
        self.open_until = -math.inf
        self.open_s = 0.0

    def is_open(self, now: float) -> bool:
        return now < self.open_until

    def record(self, now: float, outcome: str) -> None:
        if outcome not in self.counted or self.is_open(now):
            return
        failures = self.failures
        failures.append(now)
        edge = now - self.spec.window_s
        while failures and failures[0] <= edge:
            failures.popleft()
        if len(failures) >= self.spec.failures:
            self.open_until = now + self.spec.cooldown_s
            self.open_s += self.spec.cooldown_s
            failures.clear()

    def open_seconds(self, end: float) -> float:
        """Seconds open up to `end` (a cooldown running past `end` counts only up to it)."""
        return self.open_s - max(0.0, self.open_until - end)


class Aimd:
    """Client-side concurrency limit of one provider: calls beyond `limit` wait in a FIFO at the
    client. Additive increase (`increase / limit` per success), multiplicative decrease
    (x `decrease` on a 429, at most once per `decrease_every_s`)."""

    __slots__ = ("env", "in_flight", "last_decrease", "limit", "spec", "waiting")

    def __init__(self, env: simpy.Environment, spec: AimdSpec) -> None:
        self.env = env
        self.spec = spec
        self.limit = spec.initial
        self.in_flight = 0
        self.waiting: deque[simpy.Event] = deque()
        self.last_decrease = -math.inf

    def acquire(self) -> simpy.Event | None:
        """None if the call may go now (it then holds a place), else an event to wait for."""
        if not self.waiting and self.in_flight < math.floor(self.limit):
            self.in_flight += 1
            return None
        gate = self.env.event()
        self.waiting.append(gate)
        return gate

    def abandon(self, gate: simpy.Event) -> None:
        """A waiting call was cancelled: leave the queue (or give back a place just granted)."""
        if gate.triggered:
            self.release()
        else:
            self.waiting.remove(gate)

    def release(self) -> None:
        self.in_flight -= 1
        self._admit()

    def _admit(self) -> None:
        while self.waiting and self.in_flight < math.floor(self.limit):
            self.in_flight += 1
            self.waiting.popleft().succeed()

    def record(self, outcome: str) -> None:
        spec = self.spec
        if outcome == OUTCOME_RATE_LIMITED:
            now = self.env.now
            if now - self.last_decrease >= spec.decrease_every_s:
                self.limit = max(spec.min, self.limit * spec.decrease)
                self.last_decrease = now
        elif outcome == OUTCOME_OK:
            self.limit = min(spec.max, self.limit + spec.increase / self.limit)
            self._admit()


class RateLimitShare:
    """The share of attempts answered with a 429 among the attempts that ended in the last
    `window_s` (attempts counted at their end; a 429 ends the instant it is sent)."""

    __slots__ = ("ended", "limited", "window_s")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.ended: deque[tuple[float, bool]] = deque()
        self.limited = 0

    def record(self, now: float, limited: bool) -> None:
        self.ended.append((now, limited))
        self.limited += limited

    def share(self, now: float, min_samples: int) -> float | None:
        """429s / attempts ended in the window, or None with fewer than `min_samples` of them."""
        ended, edge = self.ended, now - self.window_s
        while ended and ended[0][0] <= edge:
            self.limited -= ended.popleft()[1]
        return self.limited / len(ended) if len(ended) >= min_samples else None


class Shedder:
    """Expected time of a new run from recent step times (the mean per step over the window,
    a failed step counted at the deadline as a miss, summed along the longest path of the
    workflow); a run expected past its deadline is shed. With `on_429_share`, a run is also
    shed while the recent share of the policy's attempts answered with a 429 exceeds it (a
    saturated quota fails fast, so step times alone never forecast a miss)."""

    def __init__(self, controls: ControlsSpec, workflow: Workflow) -> None:
        spec = controls.shed
        assert spec is not None
        self.window_s = spec.window_s
        self.margin = spec.margin
        self.min_samples = spec.min_samples
        self.steps = workflow.steps
        self.order = _topological(workflow)
        self.times: list[deque[tuple[float, float]]] = [deque() for _ in workflow.steps]
        self.sums = [0.0] * len(workflow.steps)
        #: Over every attempt the policy sent (so over the providers its requests use).
        self.on_429_share = spec.on_429_share if spec.on_429_share is not None else math.inf
        self.rate_limited = RateLimitShare(spec.window_s) if spec.on_429_share is not None else None

    def observe(self, index: int, now: float, seconds: float) -> None:
        self.times[index].append((now, seconds))
        self.sums[index] += seconds

    def expected_s(self, now: float) -> float | None:
        """Expected seconds of a run arriving now, or None with too little seen recently."""
        edge = now - self.window_s
        seen = 0
        means = []
        for i, times in enumerate(self.times):
            while times and times[0][0] <= edge:
                self.sums[i] -= times.popleft()[1]
            seen += len(times)
            means.append(self.sums[i] / len(times) if times else 0.0)
        if seen < self.min_samples:
            return None
        finish = [0.0] * len(self.steps)
        for i in self.order:
            before = max((finish[d] for d in self.steps[i].depends_on), default=0.0)
            finish[i] = before + means[i]
        return max(finish)

    def admits(self, now: float, deadline_s: float) -> bool:
        expected = self.expected_s(now)
        if expected is not None and expected * self.margin >= deadline_s:
            return False
        if self.rate_limited is not None:
            share = self.rate_limited.share(now, self.min_samples)
            return share is None or share <= self.on_429_share
        return True


class Controls:
    """Every load-aware control of one policy's simulation (those not configured are None)."""

    def __init__(
        self, env: simpy.Environment, spec: ControlsSpec, providers: list[str], workflow: Workflow
    ) -> None:
        self.env = env
        self.budget = RetryBudget(spec.retry_budget) if spec.retry_budget else None
        self.hedge_cap = HedgeCap(spec.hedge_cap) if spec.hedge_cap else None
        self.breakers = {p: Breaker(spec.breaker) for p in providers} if spec.breaker else None
        self.aimd = {p: Aimd(env, spec.aimd) for p in providers} if spec.aimd else None
        self.quiet_after_429_s = spec.stop_hedging_on_429_s
        self.last_429: dict[str, float] = {}
        #: Per provider, its recent 429 share (`stop_hedging_on_429_share`; None: off).
        self.quiet_429 = spec.stop_hedging_on_429_share
        self.shares_429 = (
            {p: RateLimitShare(self.quiet_429.window_s) for p in providers}
            if self.quiet_429 is not None
            else None
        )
        self.shedder = Shedder(spec, workflow) if spec.shed else None

    # ------------------------------------------------------------------ the policy's questions

    def may_retry(self) -> bool:
        """May the policy send a retry (an attempt after a failure) now?"""
        return self.budget is None or self.budget.allows()

    def may_hedge(self, provider: str) -> bool:
        """May the policy send an extra parallel attempt to `provider` now? (Takes the hedge
        from the cap when it says yes.)"""
        now = self.env.now
        if self.quiet_after_429_s is not None:
            last = self.last_429.get(provider, -math.inf)
            if now - last < self.quiet_after_429_s:
                return False
        if self.shares_429 is not None:
            quiet = self.quiet_429
            assert quiet is not None
            share = self.shares_429[provider].share(now, quiet.min_samples)
            if share is not None and share > quiet.share:
                return False
        if self.budget is not None and not self.budget.allows():
            return False
        return self.hedge_cap is None or self.hedge_cap.try_hedge(now)

    # ------------------------------------------------------------------ the engine's hooks

    def admits_run(self, deadline_s: float) -> bool:
        """False if a run arriving now should be shed."""
        return self.shedder is None or self.shedder.admits(self.env.now, deadline_s)

    def step_ended(self, index: int, seconds: float, ok: bool, deadline_s: float) -> None:
        """A step ended after `seconds`: a failed one counts as a miss, at the deadline."""
        if self.shedder is not None:
            self.shedder.observe(index, self.env.now, seconds if ok else deadline_s)

    def refuses(self, provider: str) -> bool:
        """True if `provider`'s breaker is open (the attempt is refused at the client)."""
        return self.breakers is not None and self.breakers[provider].is_open(self.env.now)

    def primary_sent(self) -> None:
        if self.hedge_cap is not None:
            self.hedge_cap.primary(self.env.now)

    def acquire(self, provider: str) -> simpy.Event | None:
        """AIMD: None if the call may go now, else an event to wait for."""
        return None if self.aimd is None else self.aimd[provider].acquire()

    def abandon(self, provider: str, gate: simpy.Event) -> None:
        if self.aimd is not None:
            self.aimd[provider].abandon(gate)

    def release(self, provider: str) -> None:
        if self.aimd is not None:
            self.aimd[provider].release()

    def attempt_ended(self, call: Call) -> None:
        """Learn from the outcome the policy sees of one attempt (after its SDK retries)."""
        outcome = call.outcome
        if outcome == OUTCOME_CANCELLED:
            return  # a loser or a deadline: says nothing about the provider
        now, provider = self.env.now, call.provider
        if outcome == OUTCOME_RATE_LIMITED:
            self.last_429[provider] = now
        if self.shares_429 is not None:
            self.shares_429[provider].record(now, outcome == OUTCOME_RATE_LIMITED)
        if self.shedder is not None and self.shedder.rate_limited is not None:
            self.shedder.rate_limited.record(now, outcome == OUTCOME_RATE_LIMITED)
        if self.budget is not None:
            self.budget.record(outcome == OUTCOME_OK)
        if self.breakers is not None:
            self.breakers[provider].record(now, outcome)
        if self.aimd is not None:
            self.aimd[provider].record(outcome)

    def breaker_open_s(self, end: float) -> float:
        """Seconds any breaker was open, summed over providers, up to `end`."""
        if self.breakers is None:
            return 0.0
        return sum(b.open_seconds(end) for b in self.breakers.values())


def _topological(workflow: Workflow) -> list[int]:
    """Step indices with every step after those it depends on."""
    done: set[int] = set()
    order: list[int] = []
    pending = list(range(len(workflow.steps)))
    while pending:
        rest = []
        for i in pending:
            if all(d in done for d in workflow.steps[i].depends_on):
                done.add(i)
                order.append(i)
            else:
                rest.append(i)
        pending = rest
    return order
