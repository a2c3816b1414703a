"""The `router` policy kind: a step run as LiteLLM's Router runs a completion.

Two releases: 1.80.0, read from its source (below), and 1.110.2 (the default,
`litellm_version: "1.110"`), whose Router decides in a compiled core (`litellm/router_rust/`,
no source shipped) and differs from 1.80.0 where driving both Routers on mocked failures
showed it (tests/policy/test_router.py): its backoff exponent counts 0, 1, 2, ... (1.80.0:
0, 0, 1, ...); after a failed retry with no healthy deployment left it stops at once (no
sleep) and goes to the fallbacks; the failure-share cooldown rule needs 5 calls this minute
(`DEFAULT_FAILURE_THRESHOLD_MINIMUM_REQUESTS`); `retry_policy` also reads
`InternalServerErrorRetries` and `DefaultRetries`; the generic fallback `*` serves only the
request's own group, not a group reached as a fallback. Everything else is 1.80.0's.

Read from litellm 1.80.0's source (file: function):
- `litellm/router.py: Router.async_function_with_fallbacks` and
  `router_utils/fallback_event_handlers.py: run_async_fallback`: after a group's retries fail,
  its `fallbacks` (exact group, else `"*"`) are tried in order, each with its own retries and
  fallbacks, while the fallback depth at entry is below `max_fallbacks`;
- `Router.async_function_with_retries`: the router is the only retry loop; after the FIRST
  failure in a group, no retry at all if no deployment of the group is healthy
  (`should_retry_this_error`); else `num_retries` (or `retry_policy` by the first failure's
  type) retries, each on a deployment picked afresh; a sleep before each retry AND after the
  last failed one, all computed from the FIRST failure (`_time_to_sleep_before_retry`);
- `Router._time_to_sleep_before_retry` and `litellm/utils.py: _calculate_retry_after`: 0 if the
  group has several deployments and one is healthy; else a whole-second Retry-After r in (0, 60]
  gives r + U[0, 0.75) s, anything else min(max(0.5 x 2^k, retry_after), 8) + U[0, 0.75) s with
  k = num_retries - remaining_retries (so k = 0, 0, 1, 2, ...);
- `router_utils/cooldown_handlers.py: _set_cooldown_deployments, _should_cooldown_deployment,
  should_cooldown_based_on_allowed_fails_policy` and `Router.deployment_callback_on_failure`:
  a failed call (429, timeout, 5xx) may cool its deployment down for every request; the time is
  the deployment's `cooldown_time`, else a 429's Retry-After, else the router's;
- the routing strategies (`router_strategy/simple_shuffle.py`, `least_busy.py`,
  `lowest_latency.py`, `lowest_tpm_rpm_v2.py`) over the deployments not cooling down;
- a stream that breaks after its first chunk (`mid_stream_error_rate`):
  `litellm_core_utils/streaming_handler.py: CustomStreamWrapper.__anext__` logs the failure
  (so `deployment_callback_on_failure` counts it) and raises `MidStreamFallbackError`, which
  `Router._acompletion_streaming_iterator` catches to walk the group's fallbacks
  (`async_function_with_fallbacks_common_utils`, no retry in the group). 1.110.2
  (`router_rust/invoke/streaming.py: _acompletion_streaming_iterator`) counts and cools it the
  same way (`StreamAttempt.report_failure`) but, once content was sent, raises the provider's
  error unless the Router has `enable_mid_stream_fallback_continuation`.

LiteLLM's caches keep a key's first TTL until it expires (`InMemoryCache.allow_ttl_override`),
so every counter here is a fixed window opened by its first event. State is per simulation
(keyed by its simpy Environment), shared by every request of the policy, like the breaker of
`sim.policy.controls`. Randomness comes from the step's named streams (`StepRun.uniform`).
"""

from __future__ import annotations

import bisect
import math
import weakref
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from sim.model.config import RouterPolicy
from sim.model.config.router import (
    INITIAL_RETRY_DELAY_S,
    JITTER_S,
    LITELLM_ALLOWED_FAILS,
    MAX_RETRY_DELAY_S,
    DeploymentSpec,
)
from sim.model.rows import (
    OUTCOME_BROKEN,
    OUTCOME_ERROR,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    Call,
)
from sim.model.workflow import Step
from sim.policy.kinds.base import Kind
from sim.policy.plans import Attempt, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes

#: The router's view of a failed attempt: LiteLLM's exception type. BROKEN: a stream that broke
#: after its first chunk (`mid_stream_error_rate`), LiteLLM's `MidStreamFallbackError` around
#: the provider's error: counted and cooled down as a server error, never retried in its group,
#: and then either the request's error or the start of the group's fallbacks (`_broken`).
RATE_LIMIT, TIMEOUT, SERVER, NO_DEPLOYMENT = "rate_limit", "timeout", "server", "no_deployment"
BROKEN = "broken"
_FAILURE = {
    OUTCOME_RATE_LIMITED: RATE_LIMIT,
    OUTCOME_TIMEOUT: TIMEOUT,
    OUTCOME_ERROR: SERVER,
    OUTCOME_BROKEN: BROKEN,
}
#: A step's end the router neither retries nor falls back from.
_FINAL = ("ok", "answered", "closed", BROKEN)
#: litellm constants: a deployment's minute counters (s), the v2 rule's failure share, the
#: traffic above which even a single deployment cools down, the latency of a timed-out call.
_MINUTE_S, _FAILURE_SHARE, _SINGLE_TRAFFIC, _TIMEOUT_LATENCY = 60.0, 0.5, 1000, 1000.0
#: 1.110: calls of a deployment this minute before the failure-share rule applies
#: (litellm/constants.py DEFAULT_FAILURE_THRESHOLD_MINIMUM_REQUESTS).
_MIN_REQUESTS = 5
#: The most a Retry-After header may ask for and still be obeyed (`_calculate_retry_after`).
_RETRY_AFTER_MAX_S = 60.0


def retry_sleep(
    retry_after: float, remaining: int, num_retries: int, min_backoff: float, u: float
) -> float:
    """litellm's `_calculate_retry_after` with `random.random()` = `u`: a whole-second
    Retry-After in (0, 60] plus jitter, else the boxed exponential backoff plus jitter."""
    jitter = JITTER_S * u
    header = header_seconds(retry_after)
    if 0 < header <= _RETRY_AFTER_MAX_S:
        return header + jitter
    sleep = INITIAL_RETRY_DELAY_S * 2.0 ** (num_retries - remaining)
    return min(max(sleep, min_backoff), MAX_RETRY_DELAY_S) + jitter


def header_seconds(retry_after: float) -> float:
    """The Retry-After header as litellm reads it (`int(header)`): a whole number of seconds,
    else -1 (a fractional value does not parse as int nor as an HTTP date)."""
    if math.isnan(retry_after) or math.isinf(retry_after) or retry_after != int(retry_after):
        return -1.0
    return float(int(retry_after))


@dataclass(slots=True)
class Deployment:
    """One deployment: its id (group and index), group, spec, and the group's size."""

    id: str
    group: str
    spec: DeploymentSpec


def _count(store: dict[str, list[float]], key: str, now: float) -> float:
    """A TTL counter's value at `now` (0 once expired: litellm drops a key past its TTL)."""
    entry = store.get(key)
    return 0.0 if entry is None or now > entry[1] else entry[0]


def _add(store: dict[str, list[float]], key: str, now: float, ttl: float, by: float = 1) -> None:
    """Add to a TTL counter; its TTL is set only when it is new or expired (fixed window)."""
    entry = store.get(key)
    if entry is None or now > entry[1]:
        entry = store[key] = [0.0, now + ttl]
    entry[0] += by


@dataclass
class RouterState:
    """What the router remembers across requests of one simulation."""

    cooldown_until: dict[str, float] = field(default_factory=dict)
    fails: dict[str, list[float]] = field(default_factory=dict)  # `{id}:fails`, 60 s
    successes: dict[str, list[float]] = field(default_factory=dict)  # `{id}:successes`, 60 s
    allowed: dict[str, list[float]] = field(default_factory=dict)  # `failed_calls`
    busy: dict[str, dict[str, int]] = field(default_factory=dict)  # least-busy, per group
    latency: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # per group
    tpm: dict[tuple[str, int], float] = field(default_factory=dict)  # (id, minute): tokens
    rpm: dict[tuple[str, int], int] = field(default_factory=dict)  # (id, minute): calls sent
    done: dict[tuple[str, int], int] = field(default_factory=dict)  # (id, minute): successes
    cooldowns: int = 0  # how many times a deployment was put in cooldown


class Router(Policy):
    """LiteLLM's Router over the scenario's providers (see the module docstring)."""

    def __init__(self, name: str, spec: RouterPolicy, routes: Routes) -> None:
        self.name = name
        self.spec = spec
        #: litellm 1.110.2's Router, where it differs from 1.80.0's (see the module docstring)
        self.v110 = spec.litellm_version == "1.110"
        #: A broken stream goes to the fallbacks (1.80 always; 1.110 if asked to continue it).
        self.falls_back_mid_stream = not self.v110 or spec.enable_mid_stream_fallback_continuation
        self.groups: dict[str, list[Deployment]] = {}
        given = spec.deployments or {}
        for model in routes.models:
            specs = given.get(model)
            if specs is None:
                specs = [DeploymentSpec(provider=p) for p in routes.serving(model)]
            self.groups[model] = [Deployment(f"{model}#{i}", model, d) for i, d in enumerate(specs)]
        self._states: weakref.WeakKeyDictionary[simpy.Environment, RouterState] = (
            weakref.WeakKeyDictionary()
        )

    def state(self, env: simpy.Environment) -> RouterState:
        """This simulation's router state (created at its first use)."""
        found = self._states.get(env)
        if found is None:
            found = self._states[env] = RouterState()
        return found

    # ------------------------------------------------------------------ the request's path

    def execute(self, run: StepRun) -> StepGenerator:
        counters = [0, 0, 0]  # calls made, picks drawn, sleeps drawn (this step's streams)
        result = yield from self._with_fallbacks(run, run.step.model, 0, counters)
        return result == "ok"

    def _with_fallbacks(
        self, run: StepRun, group: str, depth: int, counters: list[int]
    ) -> Generator[simpy.Event, Any, str]:
        """`async_function_with_fallbacks`: the group's retries, then its fallbacks in order."""
        result = yield from self._with_retries(run, group, counters)
        if result == BROKEN:
            return (yield from self._broken(run, group, depth, counters))
        if result != "failed":
            return result
        return (yield from self._fallbacks(run, group, depth, counters))

    def _broken(
        self, run: StepRun, group: str, depth: int, counters: list[int]
    ) -> Generator[simpy.Event, Any, str]:
        """A stream of `group` broke after its first chunk. 1.80 (`_acompletion_streaming_iterator`
        catching `MidStreamFallbackError`) and 1.110 with `enable_mid_stream_fallback_continuation`
        walk the group's fallbacks from inside the stream, the partial answer sent as prefill
        (here the answer starts over); a walk that fails raises to the caller, so the walk
        that returned this stream goes no further ("answered"). 1.110 without it raises the
        provider's error (`_raise_original_mid_stream_error`): no retry, no fallback."""
        if not self.falls_back_mid_stream:
            return "answered"
        result = yield from self._fallbacks(run, group, depth, counters)
        return "answered" if result == "failed" else result

    def _fallbacks(
        self, run: StepRun, group: str, depth: int, counters: list[int]
    ) -> Generator[simpy.Event, Any, str]:
        """`run_async_fallback`: the fallbacks of `group` (exact, else `*`) in order, each with
        its own retries and fallbacks, while the depth is below `max_fallbacks`."""
        result = "failed"
        fallbacks = self.spec.fallbacks
        if fallbacks is None:
            return result
        targets = fallbacks.get(group)
        if targets is None and (depth == 0 or not self.v110):  # 1.110: `*` only for the request's
            targets = fallbacks.get("*")  # own group, not for a group reached as a fallback
        if targets is None or depth >= self.spec.max_fallbacks:
            return result
        for target in targets:
            if target == group:
                continue
            depth += 1
            result = yield from self._with_fallbacks(run, target, depth, counters)
            if result != "failed":
                return result
        return result

    def _with_retries(
        self, run: StepRun, group: str, counters: list[int]
    ) -> Generator[simpy.Event, Any, str]:
        """`async_function_with_retries`: "ok", "answered" (a response that is not an answer:
        no retry, no fallback), BROKEN (a stream broke after its first chunk: the call had
        returned, no retry), "closed" (the request ended) or "failed"."""
        state = self.state(run.env)
        first, retry_after = yield from self._attempt(run, group, state, counters)
        if first in _FINAL:
            return first
        members = self.groups[group]
        if not self._healthy(state, members, run.env.now):
            return "failed"  # should_retry_this_error: nothing healthy to retry on
        retries = self._retries(first)
        if retries <= 0:
            return "failed"
        yield from self._sleep(run, state, members, first, retry_after, retries, retries, counters)
        for k in range(retries):
            if run.closed:
                return "closed"
            outcome, _ = yield from self._attempt(run, group, state, counters)
            if outcome in _FINAL:
                return outcome
            if self.v110 and not self._healthy(state, members, run.env.now):
                return "failed"  # 1.110: nothing healthy left, no sleep: on to the fallbacks
            # every sleep is computed from the group's FIRST failure (`e=original_exception`);
            # 1.80's backoff exponent repeats 0 here (remaining = retries - k), 1.110's does not
            remaining = retries - k - 1 if self.v110 else retries - k
            yield from self._sleep(
                run, state, members, first, retry_after, remaining, retries, counters
            )
        return "closed" if run.closed else "failed"

    def _retries(self, failure: str) -> int:
        """`num_retries`, or `retry_policy`'s count for the first failure's type."""
        policy = self.spec.retry_policy
        if policy is None:
            return self.spec.num_retries
        by_type = {
            RATE_LIMIT: policy.RateLimitErrorRetries,
            TIMEOUT: policy.TimeoutErrorRetries,
            SERVER: policy.InternalServerErrorRetries if self.v110 else None,
        }.get(failure)
        if by_type is not None:
            return by_type
        default = policy.DefaultRetries if self.v110 else None  # 1.80 reads neither
        return default if default is not None else self.spec.num_retries

    def _sleep(
        self,
        run: StepRun,
        state: RouterState,
        members: list[Deployment],
        first: str,
        retry_after: float,
        remaining: int,
        retries: int,
        counters: list[int],
    ) -> Generator[simpy.Event, Any, None]:
        """`_time_to_sleep_before_retry`: no wait while another deployment is healthy."""
        if len(members) != 1 and self._healthy(state, members, run.env.now):
            return
        u = run.uniform("router-sleep", counters[2])
        counters[2] += 1
        header = retry_after if first == RATE_LIMIT else math.nan
        wait = retry_sleep(header, remaining, retries, self.spec.retry_after_s, u)
        if wait > 0:
            yield run.env.timeout(wait)

    def _attempt(
        self, run: StepRun, group: str, state: RouterState, counters: list[int]
    ) -> Generator[simpy.Event, Any, tuple[str, float]]:
        """One pick and call: (outcome for the router, the 429's Retry-After or nan)."""
        if run.closed:
            return "closed", math.nan
        now = run.env.now
        members = self.groups[group]
        u = run.uniform("router-pick", counters[1])
        counters[1] += 1
        chosen = self._pick(state, group, self._healthy(state, members, now), run, u)
        if chosen is None:
            return NO_DEPLOYMENT, math.nan
        spec = chosen.spec
        timeout = spec.timeout_s if spec.timeout_s is not None else self.spec.timeout_s
        attempt, counters[0] = counters[0], counters[0] + 1
        busy = state.busy.setdefault(group, {})
        busy[chosen.id] = busy.get(chosen.id, 0) + 1
        minute = (chosen.id, int(now // _MINUTE_S))
        state.rpm[minute] = state.rpm.get(minute, 0) + 1
        try:
            call = yield from run.call(attempt, Attempt(spec.provider, group, timeout))
        finally:
            busy[chosen.id] -= 1
        if call is None or run.closed:
            return "closed", math.nan
        if call.outcome == OUTCOME_OK:
            self._succeeded(state, chosen, call, run.env.now)
            return "ok", math.nan
        failure = _FAILURE.get(call.outcome)
        if failure is None:  # a response the router returns (junk, truncated) or a refusal
            return ("answered", math.nan) if call.outcome != "breaker_open" else (SERVER, math.nan)
        self._failed(state, chosen, call, failure, run.env.now)
        return failure, call.retry_after

    # ------------------------------------------------------------------ shared state

    @staticmethod
    def _healthy(state: RouterState, members: list[Deployment], now: float) -> list[Deployment]:
        """The group's deployments not cooling down (a cooldown is active until its TTL)."""
        until = state.cooldown_until
        return [d for d in members if not now <= until.get(d.id, -math.inf)]

    def _succeeded(self, state: RouterState, d: Deployment, call: Call, now: float) -> None:
        """The success callbacks: the minute's successes, latency and token usage."""
        _add(state.successes, d.id, now, _MINUTE_S)
        minute = (d.id, int(now // _MINUTE_S))
        state.tpm[minute] = state.tpm.get(minute, 0.0) + call.input_tokens + call.output_tokens
        state.done[minute] = state.done.get(minute, 0) + 1
        tokens = call.output_tokens
        elapsed = call.end - call.start
        self._latency(state, d, elapsed / tokens if tokens > 0 else elapsed)

    def _latency(self, state: RouterState, d: Deployment, value: float) -> None:
        """lowest_latency's list: append up to the size, then replace the last entry."""
        if self.spec.routing_strategy != "latency-based-routing":
            return
        book = state.latency.setdefault(d.group, {})
        values = book.setdefault(d.id, [])
        size = self.spec.max_latency_list_size
        if len(values) < size:
            values.append(value)
        else:
            book[d.id] = [*values[: size - 1], value]

    def _failed(
        self, state: RouterState, d: Deployment, call: Call, failure: str, now: float
    ) -> None:
        """`deployment_callback_on_failure`: count the failure, maybe cool the deployment."""
        if failure == TIMEOUT:
            self._latency(state, d, _TIMEOUT_LATENCY)
        _add(state.fails, d.id, now, _MINUTE_S)
        spec = self.spec
        if d.spec.cooldown_time_s is not None:
            seconds = d.spec.cooldown_time_s
        elif failure == RATE_LIMIT and header_seconds(call.retry_after) >= 0:
            seconds = header_seconds(call.retry_after)
        else:
            seconds = spec.cooldown_time_s
        if math.isclose(seconds, 0.0, abs_tol=1e-9) or spec.disable_cooldowns:
            return
        # the rule runs first (it counts); a cooldown still active keeps its TTL
        if self._should_cool(state, d, failure, now) and not now <= state.cooldown_until.get(
            d.id, -math.inf
        ):
            state.cooldown_until[d.id] = now + seconds
            state.cooldowns += 1

    def _should_cool(self, state: RouterState, d: Deployment, failure: str, now: float) -> bool:
        """`_should_cooldown_deployment`: the allowed-fails rule if set, else the rate rule."""
        spec = self.spec
        single = len(self.groups[d.group]) == 1
        counted = spec.allowed_fails is not None and spec.allowed_fails != LITELLM_ALLOWED_FAILS
        if spec.allowed_fails_policy is None and not counted:
            ok, bad = _count(state.successes, d.id, now), _count(state.fails, d.id, now)
            share = bad / (ok + bad) if ok + bad > 0 else 0.0
            if failure == RATE_LIMIT and not single:
                return True
            if share == 1.0 and ok + bad >= _SINGLE_TRAFFIC:
                return True
            enough = ok + bad >= _MIN_REQUESTS if self.v110 else True
            return share > _FAILURE_SHARE and not single and enough
        by_type = None
        if spec.allowed_fails_policy is not None:
            by_type = {
                RATE_LIMIT: spec.allowed_fails_policy.RateLimitErrorAllowedFails,
                TIMEOUT: spec.allowed_fails_policy.TimeoutErrorAllowedFails,
            }.get(failure)
        base = spec.allowed_fails if spec.allowed_fails is not None else LITELLM_ALLOWED_FAILS
        allowed = by_type or base  # LiteLLM's `or`: a policy count of 0 falls through
        if _count(state.allowed, d.id, now) + 1 > allowed:
            return True
        _add(state.allowed, d.id, now, spec.cooldown_time_s)
        return False

    # ------------------------------------------------------------------ routing strategies

    def _pick(
        self, state: RouterState, group: str, healthy: list[Deployment], run: StepRun, u: float
    ) -> Deployment | None:
        """The routing strategy's pick among the healthy deployments (None: none available)."""
        if not healthy:
            return None
        strategy = self.spec.routing_strategy
        if strategy == "simple-shuffle":
            return simple_shuffle(healthy, u)
        if strategy == "least-busy":
            busy = dict(state.busy.get(group, {}))
            for d in healthy:
                busy.setdefault(d.id, 0)
            least = min(busy, key=lambda k: busy[k])  # the first with the lowest count
            found = next((d for d in healthy if d.id == least), None)
            return found if found is not None else healthy[int(u * len(healthy))]
        now = run.env.now
        minute = int(now // _MINUTE_S)
        tokens = run.step.input_tokens
        if strategy == "latency-based-routing":
            return self._lowest_latency(state, group, healthy, minute, tokens, u)
        return self._lowest_usage(state, healthy, minute, tokens, u)

    def _lowest_latency(
        self,
        state: RouterState,
        group: str,
        healthy: list[Deployment],
        minute: int,
        tokens: int,
        u: float,
    ) -> Deployment | None:
        """lowest_latency: the lowest mean latency per output token among the deployments
        within their limits; a deployment never measured counts a latency of 0 (LiteLLM's
        placeholder `[0]`, kept in the group's map once the map exists)."""
        book = state.latency.get(group)
        candidates: list[tuple[Deployment, float]] = []
        for d in healthy:
            values = book.setdefault(d.id, [0]) if book is not None else [0]
            mean = sum(v for v in values if isinstance(v, float)) / len(values)
            used_tpm, used_rpm = (
                state.tpm.get((d.id, minute), 0.0),
                state.done.get((d.id, minute), 0),
            )
            if used_tpm + tokens > (d.spec.tpm or math.inf):
                continue
            if used_rpm + 1 > (d.spec.rpm or math.inf):
                continue
            candidates.append((d, mean))
        if not candidates:
            return None
        lowest = min(mean for _, mean in candidates)
        valid = [
            d for d, mean in candidates if mean <= lowest + self.spec.lowest_latency_buffer * lowest
        ]
        return valid[int(u * len(valid))]

    def _lowest_usage(
        self, state: RouterState, healthy: list[Deployment], minute: int, tokens: int, u: float
    ) -> Deployment | None:
        """lowest_tpm_rpm_v2: the lowest tokens used this minute among deployments whose tpm
        and rpm limits leave room (rpm checked only once it has a count this minute)."""
        lowest, potential = math.inf, []
        for d in healthy:
            used = state.tpm.get((d.id, minute), 0.0)
            if used + tokens > (d.spec.tpm or math.inf):
                continue
            sent = state.rpm.get((d.id, minute))
            if sent is not None and sent + 1 >= (d.spec.rpm or math.inf):
                continue
            if used == lowest:
                potential.append(d)
            elif used < lowest:
                lowest, potential = used, [d]
        return potential[int(u * len(potential))] if potential else None


def simple_shuffle(healthy: list[Deployment], u: float) -> Deployment:
    """simple_shuffle: weighted by `weight`, else `rpm`, else `tpm` (whichever the FIRST healthy
    deployment sets; the others count 0 if unset), else uniform; `random.choices` with
    `random()` = `u`."""
    first = healthy[0].spec
    for key in ("weight", "rpm", "tpm"):
        if getattr(first, key) is not None:
            weights = [float(getattr(d.spec, key) or 0) for d in healthy]
            cumulative = [sum(weights[: i + 1]) for i in range(len(weights))]
            index = bisect.bisect(cumulative, u * cumulative[-1], 0, len(healthy) - 1)
            return healthy[index]
    return healthy[int(u * len(healthy))]


def _build(
    name: str,
    spec: RouterPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Router:
    """The Router of the spec's deployments (it plans per call, not per step)."""
    return Router(name, spec, routes)


ROUTER = Kind(
    "router", RouterPolicy, _build,
    no_twin_reason="kind router shares state between requests (cooldowns, least-busy counts, "
    "latencies, usage per minute): the event engine runs it",
)  # fmt: skip
#: The kinds of this module, for the registry.
KINDS = (ROUTER,)
