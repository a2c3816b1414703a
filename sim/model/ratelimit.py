"""A provider's quotas: token buckets or rolling one-minute windows, all-or-nothing admission.

A `Quota` holds every limit one call must pass on one scope (a provider, or one model on it):
tokens per minute (input + output), input and output tokens per minute apart, requests per
minute. Each limit is a `TokenBucket` (continuous refill) or a `MinuteWindow` (what was admitted
in the last 60 s). A call is admitted only if every limit has room, and then takes from all.
"""

from __future__ import annotations

import math
from collections import deque

#: What a limit counts of a call: all its tokens, its input, its output (charge), one request.
TOTAL, INPUT, OUTPUT, REQUEST = range(4)
#: Relative slack of a comparison against a limit, so that a call retried exactly at its
#: computed Retry-After is admitted despite float rounding (1e-9 of the limit: far below a token).
SLACK = 1e-9
#: Length of a rate-limit window, seconds.
MINUTE = 60.0


class TokenBucket:
    """A bucket of `capacity` that refills continuously at `capacity / 60` per second.

    It starts full (`start="full"`: a minute's worth at once, as most APIs allow) or empty
    (`start="steady"`: as if the last minute had used the whole quota).
    """

    __slots__ = ("capacity", "level", "rate_per_s", "slack", "updated")

    def __init__(self, per_minute: float, start: str = "full") -> None:
        self.capacity = float(per_minute)
        self.rate_per_s = self.capacity / MINUTE
        self.level = self.capacity if start == "full" else 0.0
        self.updated = 0.0
        self.slack = self.capacity * SLACK

    def refill(self, now: float) -> None:
        """Add what flowed in since the last look."""
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate_per_s)
            self.updated = now

    def available(self, now: float) -> float:
        """What can be taken at `now`."""
        self.refill(now)
        return self.level

    def fits(self, now: float, amount: float) -> bool:
        """True if `amount` can be taken now."""
        return self.available(now) + self.slack >= amount

    def take(self, now: float, amount: float) -> None:
        """Take `amount` (call `fits` first)."""
        self.refill(now)
        self.level -= amount

    def seconds_until(self, now: float, amount: float) -> float:
        """How long until `amount` is available (inf if it never fits)."""
        if amount > self.capacity:
            return math.inf
        missing = amount - self.available(now)
        return max(0.0, missing / self.rate_per_s)

    def seconds_until_full(self, now: float) -> float:
        """How long until the bucket is back at capacity (an API's "reset" time)."""
        return max(0.0, (self.capacity - self.available(now)) / self.rate_per_s)


class MinuteWindow:
    """A rolling one-minute window: what was taken in the last 60 s stays within `capacity`.

    `start="steady"` fills the first window as if the whole quota had been used evenly over the
    minute before t = 0 (sixty equal charges, one a second).
    """

    __slots__ = ("capacity", "entries", "slack", "used")

    def __init__(self, per_minute: float, start: str = "full") -> None:
        self.capacity = float(per_minute)
        self.slack = self.capacity * SLACK
        self.entries: deque[tuple[float, float]] = deque()
        self.used = 0.0
        if start != "full":
            share = self.capacity / MINUTE
            for j in range(int(MINUTE)):
                self.entries.append((j + 1.0 - MINUTE, share))
            self.used = self.capacity

    def _expire(self, now: float) -> None:
        """Drop what left the window (taken at or before now - 60 s)."""
        entries, edge = self.entries, now - MINUTE + 1e-9  # 1e-9 s: float rounding
        while entries and entries[0][0] <= edge:
            self.used -= entries.popleft()[1]
        if not entries:
            self.used = 0.0

    def available(self, now: float) -> float:
        """What can be taken at `now`."""
        self._expire(now)
        return self.capacity - self.used

    def fits(self, now: float, amount: float) -> bool:
        """True if `amount` can be taken now."""
        return self.available(now) + self.slack >= amount

    def take(self, now: float, amount: float) -> None:
        """Take `amount` now (call `fits` first)."""
        self._expire(now)
        self.entries.append((now, float(amount)))
        self.used += amount

    def seconds_until(self, now: float, amount: float) -> float:
        """How long until enough old charges leave the window for `amount` (inf if never)."""
        if amount > self.capacity:
            return math.inf
        need = amount - self.available(now) - self.slack
        if need <= 0:
            return 0.0
        freed = 0.0
        for at, taken in self.entries:
            freed += taken
            if freed >= need:
                return max(0.0, at + MINUTE - now)
        return 0.0  # unreachable: everything leaving frees the whole capacity

    def seconds_until_full(self, now: float) -> float:
        """How long until the window is empty again (its newest charge has aged out)."""
        self._expire(now)
        return max(0.0, self.entries[-1][0] + MINUTE - now) if self.entries else 0.0


Limit = TokenBucket | MinuteWindow


class Quota:
    """Every limit of one scope together: a call is admitted only if all of them have room.

    `tokens`, `requests`, `inputs`, `outputs` are the TPM, RPM, input-TPM and output-TPM limits
    (None when not set).
    """

    __slots__ = ("inputs", "limits", "outputs", "requests", "simple", "tokens")

    def __init__(
        self,
        tpm: float | None,
        rpm: float | None,
        *,
        input_tpm: float | None = None,
        output_tpm: float | None = None,
        window: str = "bucket",
        start: str = "full",
    ) -> None:
        kind = TokenBucket if window == "bucket" else MinuteWindow
        self.tokens = kind(tpm, start) if tpm else None
        self.requests = kind(rpm, start) if rpm else None
        self.inputs = kind(input_tpm, start) if input_tpm else None
        self.outputs = kind(output_tpm, start) if output_tpm else None
        counted = ((self.tokens, TOTAL), (self.inputs, INPUT), (self.outputs, OUTPUT))
        self.limits: list[tuple[Limit, int]] = [(lim, k) for lim, k in counted if lim is not None]
        if self.requests is not None:
            self.limits.append((self.requests, REQUEST))
        #: Only the classic TPM/RPM buckets: admission takes the hand-written fast path.
        self.simple = window == "bucket" and self.inputs is None and self.outputs is None

    @property
    def unlimited(self) -> bool:
        """True if no limit is set (every call is admitted)."""
        return not self.limits

    @staticmethod
    def _amount(kind: int, tokens: float, input_tokens: float) -> float:
        if kind == TOTAL:
            return tokens
        if kind == INPUT:
            return input_tokens
        if kind == OUTPUT:
            return tokens - input_tokens
        return 1.0

    def fits(self, now: float, tokens: float, input_tokens: float = 0) -> bool:
        """True if a call charging `tokens` (of which `input_tokens` input) fits every limit."""
        return all(
            limit.fits(now, self._amount(kind, tokens, input_tokens)) for limit, kind in self.limits
        )

    def take(self, now: float, tokens: float, input_tokens: float = 0) -> None:
        """Charge the call to every limit (call `fits` first)."""
        for limit, kind in self.limits:
            limit.take(now, self._amount(kind, tokens, input_tokens))

    def admit(self, now: float, tokens: int, input_tokens: int = 0) -> bool:
        """Take one request and `tokens` tokens if every limit has room now (a 429 otherwise,
        nothing taken). `input_tokens` only matters to a split input/output quota.

        On the hot path of every call, so the classic case (TPM and RPM buckets) is written out.
        """
        if not self.simple:
            if not self.fits(now, tokens, input_tokens):
                return False
            self.take(now, tokens, input_tokens)
            return True
        bucket_t, bucket_r = self.tokens, self.requests
        if bucket_t is not None and now > bucket_t.updated:  # refill (as `TokenBucket.refill`)
            level = bucket_t.level + (now - bucket_t.updated) * bucket_t.rate_per_s
            bucket_t.level = level if level < bucket_t.capacity else bucket_t.capacity
            bucket_t.updated = now
        if bucket_r is not None and now > bucket_r.updated:
            level = bucket_r.level + (now - bucket_r.updated) * bucket_r.rate_per_s
            bucket_r.level = level if level < bucket_r.capacity else bucket_r.capacity
            bucket_r.updated = now
        if (bucket_t is not None and bucket_t.level + bucket_t.slack < tokens) or (
            bucket_r is not None and bucket_r.level + bucket_r.slack < 1
        ):
            return False
        if bucket_t is not None:
            bucket_t.level -= tokens
        if bucket_r is not None:
            bucket_r.level -= 1
        return True

    def retry_after(self, now: float, tokens: int, input_tokens: int = 0) -> float:
        """Exact seconds until a call charging `tokens` would be admitted (inf if never)."""
        waits = [0.0]
        for limit, kind in self.limits:
            waits.append(limit.seconds_until(now, self._amount(kind, tokens, input_tokens)))
        return max(waits)

    def reset_after(self, now: float) -> float:
        """Seconds until every limit is whole again (an API's reset time)."""
        return max([0.0, *(limit.seconds_until_full(now) for limit, _ in self.limits)])


def retry_after_header(mode: str, exact: float, reset: float) -> float:
    """The Retry-After a provider sends, from the exact wait and the reset time.

    exact: `exact`; seconds: `exact` rounded up to whole seconds, at least 1 (RFC 9110
    Retry-After is whole delay-seconds); window: the time until the quota is whole again,
    at least `exact`.
    """
    if mode == "exact" or math.isinf(exact):
        return exact
    if mode == "seconds":
        return float(max(1, math.ceil(exact)))
    return max(exact, reset)
