"""Token buckets for a provider's shared quotas (tokens per minute, requests per minute)."""

from __future__ import annotations

import math


class TokenBucket:
    """A bucket of `capacity` that refills continuously at `capacity / 60` per second.

    It starts full: a provider's per-minute limit allows a minute's worth at once, then refills.
    """

    __slots__ = ("capacity", "level", "rate_per_s", "updated")

    def __init__(self, per_minute: float) -> None:
        self.capacity = float(per_minute)
        self.rate_per_s = self.capacity / 60.0
        self.level = self.capacity
        self.updated = 0.0

    def refill(self, now: float) -> None:
        """Add what flowed in since the last look."""
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate_per_s)
            self.updated = now

    def available(self, now: float) -> float:
        """What can be taken at `now`."""
        self.refill(now)
        return self.level

    def seconds_until(self, now: float, amount: float) -> float:
        """How long until `amount` is available (inf if it never fits)."""
        if amount > self.capacity:
            return math.inf
        missing = amount - self.available(now)
        return max(0.0, missing / self.rate_per_s)


class Quota:
    """A provider's TPM and RPM buckets together: a call is admitted only if both have room."""

    __slots__ = ("requests", "tokens")

    def __init__(self, tpm: float | None, rpm: float | None) -> None:
        self.tokens = TokenBucket(tpm) if tpm else None
        self.requests = TokenBucket(rpm) if rpm else None

    def admit(self, now: float, tokens: int) -> bool:
        """Take one request and `tokens` tokens if both fit now (a 429 otherwise, nothing taken).

        On the hot path of every call, so the refill is written out rather than called."""
        bucket_t, bucket_r = self.tokens, self.requests
        for bucket in (bucket_t, bucket_r):
            if bucket is not None and now > bucket.updated:
                bucket.level = min(
                    bucket.capacity, bucket.level + (now - bucket.updated) * bucket.rate_per_s
                )
                bucket.updated = now
        if (bucket_t is not None and bucket_t.level < tokens) or (
            bucket_r is not None and bucket_r.level < 1
        ):
            return False
        if bucket_t is not None:
            bucket_t.level -= tokens
        if bucket_r is not None:
            bucket_r.level -= 1
        return True

    def retry_after(self, now: float, tokens: int) -> float:
        """Seconds until a call of `tokens` would be admitted (what a Retry-After header says)."""
        waits = [0.0]
        if self.tokens is not None:
            waits.append(self.tokens.seconds_until(now, tokens))
        if self.requests is not None:
            waits.append(self.requests.seconds_until(now, 1))
        return max(waits)
