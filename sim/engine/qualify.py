"""When the vectorized engine may stand in for the event engine, and when it may not.

Two checks. Before: `qualifies` is a whitelist: every scenario field the vectorized engine does
not implement must be at its default, and the runtime policy and latency laws must be exactly the
classes it knows, so a feature added later (slowdown, episodes, validators...) falls back to the
event engine instead of silently giving other numbers. A provider's client rules (`sdk`,
`overhead_s`) it implements per call (`sim.engine.vector_client`). After: `limit_that_binds`
replays the vectorized calls against every provider's slots and quotas; if any would ever have
made a call wait or refused one, the calls would not have been independent, and it says which.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
from pydantic import BaseModel

from sim.engine.simulation import serving_latencies
from sim.model.config import (
    ArrivalsSpec,
    BackoffSpec,
    BillingSpec,
    CustomerRetrySpec,
    CustomersSpec,
    CutPolicy,
    DistSpec,
    DownshiftPolicy,
    HardnessSpec,
    HedgePolicy,
    ModelSpec,
    PilotSpec,
    PriceSpec,
    ProviderSpec,
    RacePolicy,
    Scenario,
    SdkSpec,
    ServingSpec,
    StallSpec,
    StepSpec,
    WaitPolicy,
    WhenHardSpec,
    WorkflowSpec,
)
from sim.model.latency import (
    CallLatency,
    Constant,
    Empirical,
    Exponential,
    LogNormal,
    build_distribution,
)
from sim.model.words import plural
from sim.policy.kinds import Hedge, Race, Sequential
from sim.policy.plans import Attempt, Policy

#: Config fields the vectorized engine implements, per config class (others must be default).
KNOWN_FIELDS: dict[type[BaseModel], frozenset[str]] = {
    Scenario: frozenset(
        {
            "name",
            "description",
            "seed",
            "deadline_s",
            "requests",
            "arrivals",
            "customers",
            "models",
            "providers",
            "workflow",
            "policies",
            "pilot",
            "billing",
            "sweep",
            "engine",
            "hardness",
            "slo",  # a promise read against the results: it changes no draw
        }
    ),
    ArrivalsSpec: frozenset(
        {"kind", "rate_per_s", "peak_to_mean", "burst_s", "file", "column", "time_scale"}
    ),
    CustomersSpec: frozenset({"retry"}),
    CustomerRetrySpec: frozenset({"probability", "max", "delay_s"}),
    ModelSpec: frozenset({"price_per_mtok", "quality", "when_hard"}),
    HardnessSpec: frozenset({"share"}),
    WhenHardSpec: frozenset({"invalid_rate", "length"}),
    PriceSpec: frozenset({"input", "output"}),
    # the client's rules, run per call (sim.engine.vector_client); a 429's Retry-After headers
    # and how the client reads them are never used: without shared state no call is limited
    ProviderSpec: frozenset(
        {
            "concurrency",
            "tpm",
            "rpm",
            "serves",
            "sdk",
            "overhead_s",
            "overhead_held",
            "retry_after",
            "retry_after_ms",
        }
    ),
    SdkSpec: frozenset(
        {
            "preset",
            "retries",
            "retry_on",
            "backoff",
            "timeout_s",
            "honours_deadline",
            "retry_after_ms",
            "retry_after_max_s",
            "retry_after_above_max",
            "retry_after_integer_only",
            "retry_after_jitter_s",
        }
    ),
    BackoffSpec: frozenset(
        {
            "base_s",
            "max_s",
            "multiplier",
            "jitter",
            "jitter_s",
            "honour_retry_after",
            "retry_after_max_s",
        }
    ),
    ServingSpec: frozenset({"ttft_s", "tokens_per_s", "stall", "error_rate", "invalid_rate"}),
    StallSpec: frozenset({"probability", "extra_s"}),
    DistSpec: frozenset(
        {"dist", "median", "p99", "mu", "sigma", "mean", "value", "file", "column", "max"}
    ),
    WorkflowSpec: frozenset({"steps"}),
    StepSpec: frozenset(
        {"id", "model", "input_tokens", "output_tokens", "after", "required", "provider"}
    ),
    PilotSpec: frozenset({"requests"}),
    BillingSpec: frozenset({"cancelled"}),
    WaitPolicy: frozenset({"kind", "timeout_s", "retries", "providers"}),
    CutPolicy: frozenset({"kind", "cutoff", "retries", "providers"}),
    RacePolicy: frozenset({"kind", "attempts", "providers", "retries", "timeout_s"}),
    HedgePolicy: frozenset({"kind", "after", "providers", "hedges"}),
    DownshiftPolicy: frozenset({"kind", "cutoff", "to", "retries", "providers"}),
}
#: Fields not walked: the policies (only the one being run matters), the sweep grid and the SLO.
_NOT_WALKED = {(Scenario, "policies"), (Scenario, "sweep"), (Scenario, "slo")}
_KNOWN_VALUES: dict[tuple[type[BaseModel], str], frozenset[Any]] = {
    (BillingSpec, "cancelled"): frozenset({"full", "elapsed", "none"}),
    (DistSpec, "dist"): frozenset({"lognormal", "exponential", "constant", "empirical"}),
    (BackoffSpec, "jitter"): frozenset({"none", "full", "equal", "sdk", "additive"}),
}
#: What a client may retry that the vectorized engine knows (`sdk.retry_on`): of these, only
#: hard errors (5xx) and its own timeouts ever happen without shared state.
_KNOWN_RETRY_ON = frozenset({"429", "408", "409", "5xx", "timeout", "connection"})
#: Runtime policy classes and the attributes they may have.
_POLICY_ATTRIBUTES: dict[type[Policy], frozenset[str]] = {
    Sequential: frozenset({"name", "plans", "backoff", "controls"}),
    Race: frozenset({"name", "rounds", "backoff", "controls"}),
    Hedge: frozenset({"name", "plans", "after", "controls"}),
}
#: Runtime attributes the vectorized engine implements only at None (client backoff waits).
_OFF_ATTRIBUTES = frozenset({"backoff", "controls"})
_ATTEMPT_FIELDS = frozenset({"provider", "model", "give_up_after"})
_LATENCY_FIELDS = frozenset(
    {
        "ttft",
        "tokens_per_s",
        "stall_probability",
        "stall_extra",
        "error_rate",
        "invalid_rate",
        "ttft_s_per_ktok",
    }
)
_DISTRIBUTIONS = (LogNormal, Exponential, Constant, Empirical)


def qualifies(scenario: Scenario, policy: Policy) -> tuple[bool, str]:
    """(True, "") if the vectorized engine implements everything this policy run uses, else
    (False, why). Limits are checked afterwards on the calls (`limit_that_binds`)."""
    reason = _foreign(scenario, "")
    if reason is None:
        spec = scenario.policies.get(policy.name)
        if spec is not None:
            reason = _foreign(spec, f"policies.{policy.name}")
    retry = scenario.customers.retry
    if reason is None and retry.max > 0 and retry.probability > 0:
        reason = "customers re-send failed requests (customers.retry)"
    if reason is None:
        reason = _foreign_runtime(policy)
    if reason is None:
        reason = _foreign_latency(scenario)
    if reason is None:
        reason = _foreign_client(scenario)
    return reason is None, reason or ""


def _foreign(obj: Any, path: str) -> str | None:
    """The first setting under `obj` the vectorized engine does not implement, or None."""
    if isinstance(obj, BaseModel):
        known = KNOWN_FIELDS.get(type(obj))
        if known is None:
            return f"{path or 'the scenario'} is a {type(obj).__name__}, unknown to it"
        for name, info in type(obj).model_fields.items():
            where = f"{path}.{name}" if path else name
            value = getattr(obj, name)
            if (type(obj), name) in _NOT_WALKED:
                continue
            if name not in known:
                if value != info.get_default(call_default_factory=True):
                    return f"{where} is set"
                continue
            allowed = _KNOWN_VALUES.get((type(obj), name))
            if allowed is not None and value not in allowed:
                return f"{where} is {value!r}"
            found = _foreign(value, where)
            if found:
                return found
    elif isinstance(obj, dict):
        for key, value in obj.items():
            found = _foreign(value, f"{path}.{key}")
            if found:
                return found
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            found = _foreign(value, f"{path}[{i}]")
            if found:
                return found
    return None


def _foreign_runtime(policy: Policy) -> str | None:
    """Why the built policy is not one the vectorized engine reproduces, or None."""
    attributes = _POLICY_ATTRIBUTES.get(type(policy))
    if attributes is None:
        return f"policy class {type(policy).__name__} is not vectorized"
    if set(vars(policy)) - attributes:
        return f"policy class {type(policy).__name__} has attributes it does not know"
    for name in _OFF_ATTRIBUTES & attributes:
        if getattr(policy, name, None) is not None:
            return f"policy {policy.name} sets {name}"
    if {f.name for f in fields(Attempt)} != _ATTEMPT_FIELDS:
        return "Attempt has fields it does not know"
    return None


def _foreign_latency(scenario: Scenario) -> str | None:
    """Why a latency law is not one the vectorized engine transforms, or None."""
    if {f.name for f in fields(CallLatency)} != _LATENCY_FIELDS:
        return "CallLatency has fields it does not know"
    for (provider, model), law in serving_latencies(scenario).items():
        if law.ttft_s_per_ktok:
            return f"{provider}/{model} has prefill (ttft_s_per_ktok)"
        for dist in (law.ttft, law.tokens_per_s, law.stall_extra):
            if dist is not None and type(dist) not in _DISTRIBUTIONS:
                return f"{provider}/{model} uses distribution {type(dist).__name__}"
    return None


def _foreign_client(scenario: Scenario) -> str | None:
    """Why a provider's client rules are not ones the vectorized engine reproduces, or None."""
    for name, spec in scenario.providers.items():
        unknown = sorted(set(spec.sdk.retry_on) - _KNOWN_RETRY_ON)
        if unknown:
            return f"providers.{name}.sdk.retry_on has {unknown[0]!r}"
        if spec.overhead_s is not None:
            law = build_distribution(spec.overhead_s)
            if type(law) not in _DISTRIBUTIONS:
                return f"providers.{name}.overhead_s uses distribution {type(law).__name__}"
    return None


# ---------------------------------------------------------------------------- after the fact


def limit_that_binds(
    scenario: Scenario,
    provider: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    tokens: np.ndarray,
) -> str | None:
    """Which provider limit the calls would have met (a slot count reached, a TPM or RPM bucket
    short), or None if none ever binds. Ties count against us (a call starting as another ends
    needs its own slot; a bucket within rounding of empty counts as empty)."""
    for code, (name, spec) in enumerate(scenario.providers.items()):
        mine = provider == code
        count = int(mine.sum())
        if not count:
            continue
        if count > spec.concurrency and _peak_in_service(start[mine], end[mine]) > spec.concurrency:
            return (
                f"providers.{name}.concurrency ({plural(spec.concurrency, 'slot')}) "
                "would be reached"
            )
        order = np.argsort(start[mine], kind="stable")
        at = start[mine][order]
        if spec.tpm and _bucket_runs_short(at, tokens[mine][order].astype(float), spec.tpm):
            return (
                f"providers.{name}.tpm ({plural(spec.tpm, 'token')} per minute) would refuse a call"
            )
        if spec.rpm and _bucket_runs_short(at, np.ones(count), spec.rpm):
            return (
                f"providers.{name}.rpm ({plural(spec.rpm, 'request')} per minute) "
                "would refuse a call"
            )
    return None


def _peak_in_service(start: np.ndarray, end: np.ndarray) -> int:
    """Most calls holding a slot at once (a call starting at another's end counts as overlap)."""
    times = np.concatenate((start, end))
    change = np.concatenate((np.ones(len(start)), -np.ones(len(end))))
    order = np.lexsort((-change, times))  # at equal times, starts before ends
    return int(np.cumsum(change[order]).max())


def _bucket_runs_short(times: np.ndarray, amounts: np.ndarray, per_minute: float) -> bool:
    """True if a `sim.model.ratelimit` bucket (starts full, refills continuously, admits when its
    level
    is at least the amount) could refuse one of these takes, in time order.

    Without refusals the level before take j is min over i <= j of
    C + r (t_j - t_i) - (amounts i..j-1), so every take fits iff for all i <= j:
    amounts i..j <= C + r (t_j - t_i). Checked in one pass with a running minimum, with a margin
    for float rounding (a bucket within it of refusing counts as refusing)."""
    capacity, rate = float(per_minute), float(per_minute) / 60.0
    total = np.cumsum(amounts)
    after = total - rate * times  # P_j - r t_j
    before = total - amounts - rate * times  # P_{i-1} - r t_i
    slack = capacity + np.minimum.accumulate(before) - after
    margin = 1e-9 * (float(total[-1]) + rate * float(times[-1]) + capacity) + 1e-6
    return bool((slack < margin).any())


class LimitWatch:
    """`limit_that_binds` for calls given a chunk of requests at a time (the vectorized engine
    in constant memory): it keeps only the calls a later chunk could still meet, and gives the
    same answer as one check over all the calls.

    `add` returns a limit as soon as one surely binds; `finish` gives the final answer."""

    def __init__(self, scenario: Scenario) -> None:
        self.specs = list(scenario.providers.items())
        self._slots = [(np.empty(0), np.empty(0)) for _ in self.specs]
        self._tpm = [_Bucket(spec.tpm) if spec.tpm else None for _, spec in self.specs]
        self._rpm = [_Bucket(spec.rpm) if spec.rpm else None for _, spec in self.specs]

    def add(
        self,
        provider: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        tokens: np.ndarray,
        horizon: float,
    ) -> str | None:
        """Take a chunk's calls (`provider` codes in the scenario's order); no later chunk has a
        call starting before `horizon`."""
        for code, (name, spec) in enumerate(self.specs):
            mine = provider == code
            carried_start, carried_end = self._slots[code]
            starts = np.concatenate((carried_start, start[mine]))
            ends = np.concatenate((carried_end, end[mine]))
            if len(starts) > spec.concurrency and _peak_in_service(starts, ends) > spec.concurrency:
                return (
                    f"providers.{name}.concurrency ({plural(spec.concurrency, 'slot')}) "
                    "would be reached"
                )
            still = ends >= horizon  # a later call starting at one's end overlaps it
            self._slots[code] = (starts[still], ends[still])
            at = start[mine]
            tpm, rpm = self._tpm[code], self._rpm[code]
            if tpm is not None and tpm.add(at, tokens[mine].astype(float), horizon):
                return (
                    f"providers.{name}.tpm ({plural(spec.tpm, 'token')} per minute) "
                    "would refuse a call"
                )
            if rpm is not None and rpm.add(at, np.ones(len(at)), horizon):
                return (
                    f"providers.{name}.rpm ({plural(spec.rpm, 'request')} per minute) "
                    "would refuse a call"
                )
        return None

    def finish(self) -> str | None:
        """The limit that binds over every call given, or None."""
        for (name, spec), tpm, rpm in zip(self.specs, self._tpm, self._rpm, strict=True):
            if tpm is not None and tpm.finish():
                return (
                    f"providers.{name}.tpm ({plural(spec.tpm, 'token')} per minute) "
                    "would refuse a call"
                )
            if rpm is not None and rpm.finish():
                return (
                    f"providers.{name}.rpm ({plural(spec.rpm, 'request')} per minute) "
                    "would refuse a call"
                )
        return None


class _Bucket:
    """`_bucket_runs_short` over takes given in chunks: takes before the horizon are final and
    folded into running sums (the same sums, so the same slack); later ones wait."""

    def __init__(self, per_minute: float) -> None:
        self.capacity, self.rate = float(per_minute), float(per_minute) / 60.0
        self.total, self.last_time = 0.0, 0.0
        self.min_before, self.min_slack = np.inf, np.inf
        self._times, self._amounts = np.empty(0), np.empty(0)

    def add(self, times: np.ndarray, amounts: np.ndarray, horizon: float) -> bool:
        """Take a chunk; True if the bucket surely runs short (the margin only grows)."""
        t = np.concatenate((self._times, times))
        a = np.concatenate((self._amounts, amounts))
        order = np.argsort(t, kind="stable")
        t, a = t[order], a[order]
        ready = int(np.searchsorted(t, horizon, side="left"))
        self._fold(t[:ready], a[:ready])
        self._times, self._amounts = t[ready:], a[ready:]
        return bool(self.min_slack < self._margin())

    def finish(self) -> bool:
        """True if the bucket runs short over every take given."""
        return self.add(np.empty(0), np.empty(0), np.inf)

    def _fold(self, t: np.ndarray, a: np.ndarray) -> None:
        if not len(t):
            return
        total = self.total + np.cumsum(a)
        after = total - self.rate * t
        before = total - a - self.rate * t
        running = np.minimum(self.min_before, np.minimum.accumulate(before))
        slack = self.capacity + running - after
        self.min_slack = min(self.min_slack, float(slack.min()))
        self.min_before, self.total, self.last_time = float(running[-1]), float(total[-1]), t[-1]

    def _margin(self) -> float:
        return 1e-9 * (self.total + self.rate * float(self.last_time) + self.capacity) + 1e-6
