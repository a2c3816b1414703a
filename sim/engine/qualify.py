"""When the vectorized engine may stand in for the event engine, and when it may not.

Two checks. Before: `qualifies` holds the policy's features (named by the compiler,
`sim.plan.features`: every format field set away from its default, the kind, customer re-sends,
the laws) against `VECTORIZED_FEATURES`, what the vectorized engine implements, so a feature
added later (slowdown, episodes, validators...) falls back to the event engine instead of
silently giving other numbers; a provider's client rules (`sdk`, `overhead_s`) it implements
per call (`sim.engine.vector_client`). After: `limit_that_binds` replays the vectorized calls
against every provider's slots and quotas; if any would ever have made a call wait or refused
one, the calls would not have been independent, and it says which.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sim.model.config import ProviderSpec
from sim.model.words import plural
from sim.plan import PolicyPlan

#: Features the vectorized engine implements beyond the plain ones (per call, nothing shared):
#: a provider's client rules (`sdk`, `overhead_s`: `sim.engine.vector_client`), how a 429's
#: Retry-After is sent (never used: without shared state no call is rate-limited), and a call's
#: stream: a stall's place, a mid-stream break, the cuts that watch the stream
#: (`sim.engine.vector_streams`) and a streaming step's client read timeout
#: (`sim.engine.vector_client.read_cuts`).
VECTORIZED_FEATURES: frozenset[str] = frozenset(
    {"client.sdk", "client.overhead", "quota.retry_after", "quota.retry_after_ms"}
    | {"stream.stall_where", "stream.mid_stream_error"}
    | {"stream.first_token_timeout", "stream.idle_timeout", "step.stream"}
    | {f"client.retry_on.{kind}" for kind in ("429", "408", "409", "5xx", "timeout", "connection")}
)


def qualifies(
    policy: PolicyPlan, supported: frozenset[str] = VECTORIZED_FEATURES
) -> tuple[bool, str]:
    """(True, "") if the vectorized engine implements every feature this policy run uses, else
    (False, why: the first feature it lacks). Limits are checked afterwards on the calls
    (`limit_that_binds`)."""
    for feature in policy.features:
        if feature.name not in supported:
            return False, feature.reason
    return True, ""


# ---------------------------------------------------------------------------- after the fact


def limit_that_binds(
    providers: Mapping[str, ProviderSpec],
    provider: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    tokens: np.ndarray,
) -> str | None:
    """Which provider limit the calls would have met (a slot count reached, a TPM or RPM bucket
    short), or None if none ever binds. Ties count against us (a call starting as another ends
    needs its own slot; a bucket within rounding of empty counts as empty)."""
    for code, (name, spec) in enumerate(providers.items()):
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

    def __init__(self, providers: Mapping[str, ProviderSpec]) -> None:
        self.specs = list(providers.items())
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
