"""A client's wait before a retry: exponential backoff with jitter, or the 429's Retry-After.

One function, `retry_wait`, used by the policies (between attempts), the SDK layer (below the
policy) and customer re-sends, so all three wait the same way; `sdk_wait` is the SDK layer's, a
client preset's exact rules (retry-after-ms, a long Retry-After, its jitter), `retry_wait`
itself under preset `none`. The jitter uniform comes from the caller's named stream, so every
policy sees the same jitter for the same retry (common random numbers).
"""

from __future__ import annotations

import math

from sim.model.config import BackoffSpec, SdkSpec


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
    if spec.jitter == "sdk":  # openai / anthropic `_calculate_retry_timeout`
        return wait * (1 - 0.25 * u)
    if spec.jitter == "additive":  # litellm `calculate_retry_after`
        return wait + spec.jitter_s * u
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


def sdk_wait(
    sdk: SdkSpec,
    retry: int,
    u: float,
    retry_after: float = math.nan,
    retry_after_ms: float = math.nan,
) -> float | None:
    """Seconds a client waits before its retry `retry` (1, 2, ...) after a failure whose
    `Retry-After` was `retry_after` and `retry-after-ms` header `retry_after_ms` (seconds; NaN
    when not sent), or None when it does not retry at all (openai: a Retry-After over 120 s).

    The header read is `retry-after-ms` when the client prefers it and it was sent, else
    `Retry-After` (ignored when not whole seconds under `retry_after_integer_only`). A positive
    one within `retry_after_cap` is waited plus `retry_after_jitter_s * u`; a longer one follows
    `retry_after_above_max`; none (or an unusable one) gets the jittered backoff. With preset
    `none` this is `retry_wait` exactly.
    """
    backoff = sdk.backoff
    if (
        sdk.preset == "none"
        and not sdk.retry_after_ms
        and not sdk.retry_after_integer_only
        and sdk.retry_after_max_s is None
        and sdk.retry_after_jitter_s == 0
        and sdk.retry_after_above_max == "backoff"
    ):  # the layer before presets, exactly
        return retry_wait(backoff, retry, u, retry_after)
    header = retry_after
    if sdk.retry_after_ms and not math.isnan(retry_after_ms):  # sent
        header = retry_after_ms
    elif sdk.retry_after_integer_only and not (math.isfinite(header) and header.is_integer()):
        header = math.nan
    usable = header > 0 if sdk.preset != "none" else header >= 0  # False for NaN
    if backoff.honour_retry_after and usable:
        cap = sdk.retry_after_cap
        if header <= cap:
            return header + sdk.retry_after_jitter_s * u
        rule = sdk.retry_after_above_max
        if rule == "cap":
            return cap + sdk.retry_after_jitter_s * u
        if rule == "no_retry" and math.isfinite(header):
            return None
    return backoff_wait(backoff, retry, u)
