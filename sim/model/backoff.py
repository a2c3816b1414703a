"""A client's wait before a retry: exponential backoff with jitter, or the 429's Retry-After.

One function, `retry_wait`, used by the policies (between attempts), the SDK layer (below the
policy) and customer re-sends, so all three wait the same way. The jitter uniform comes from the
caller's named stream, so every policy sees the same jitter for the same retry (common random
numbers).
"""

from __future__ import annotations

import math

from sim.model.config import BackoffSpec


def backoff_wait(spec: BackoffSpec, retry: int, u: float) -> float:
    """The backoff wait before retry number `retry` (1, 2, ...), jittered with uniform `u`.

    The unjittered wait is `min(max_s, base_s * multiplier**(retry - 1))`; `full` jitter draws
    uniformly in [0, wait] and `equal` jitter in [wait/2, wait] (the AWS Architecture Blog's
    "Exponential Backoff And Jitter" names).
    """
    wait = min(spec.max_s, spec.base_s * spec.multiplier ** max(0, retry - 1))
    if spec.jitter == "full":
        return wait * u
    if spec.jitter == "equal":
        return wait / 2 + wait / 2 * u
    return wait


def retry_wait(spec: BackoffSpec, retry: int, u: float, retry_after: float = math.nan) -> float:
    """Seconds to wait before retry `retry` after a failure whose Retry-After was `retry_after`
    (NaN when the failure was not a 429).

    As the OpenAI and Anthropic SDKs do: a Retry-After within `retry_after_max_s` is waited
    exactly; otherwise (no header, or one beyond the cap) the jittered backoff is used.
    """
    if spec.honour_retry_after and retry_after <= spec.retry_after_max_s:  # False for NaN
        return retry_after
    return backoff_wait(spec, retry, u)
