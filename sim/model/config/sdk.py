"""Client presets: what a named SDK version does on its own, as data for `providers.P.sdk`.

Each preset is the long form of `sdk` (docs/clients.md) with the values read from that
version's source: openai 3.57.0 (`openai/_base_client.py`, `openai/_constants.py`), anthropic
2.15.0 (`anthropic/_base_client.py`, `anthropic/_constants.py`) and litellm 1.110.2
(`litellm/utils.py` `calculate_retry_after`, `should_retry`; `litellm/constants.py`). `none` is
tailsim's own SDK layer as it was before presets (every number on main stays). A scenario's
`sdk` mapping is laid over its preset key by key (`backoff` too), see `SdkSpec`.
"""

from __future__ import annotations

from typing import Any

#: What a client may retry: HTTP 408, 409, 429, any 5xx (the simulated provider's hard errors),
#: its own per-attempt timeout, a connection error (not produced by the simulated provider).
RETRY_ON = ("429", "408", "409", "5xx", "timeout", "connection")

_SDK_RETRY_ON = ["429", "408", "409", "5xx", "timeout", "connection"]

PRESETS: dict[str, dict[str, Any]] = {
    # tailsim's SDK layer before presets: retries 429s and hard errors, honours the deadline
    "none": {
        "retries": 0,
        "retry_on": ["429", "5xx"],
        "backoff": {},
        "retry_after_ms": False,
        "retry_after_max_s": None,
        "retry_after_above_max": "backoff",
        "retry_after_integer_only": False,
        "retry_after_jitter_s": 0.0,
        "timeout_s": None,
        "stream_timeout_s": None,
        "honours_deadline": True,
    },
    # openai 3.57.0: DEFAULT_MAX_RETRIES 2, INITIAL_RETRY_DELAY 0.5, MAX_RETRY_DELAY 8.0,
    # MAX_RETRY_AFTER_DELAY 120 (_constants.py); _calculate_retry_timeout: a Retry-After in
    # (0, 120] is waited, else min(0.5 * 2^k, 8) * (1 - 0.25 U); _should_retry: a Retry-After
    # above 120 s is not retried; 408/409/429/5xx, timeouts and connection errors are;
    # _parse_retry_after_header prefers retry-after-ms; DEFAULT_TIMEOUT 600 s per attempt; on
    # a stream that timeout is httpx's read timeout (AsyncStream._iter_events), no other.
    "openai": {
        "retries": 2,
        "retry_on": _SDK_RETRY_ON,
        "backoff": {"base_s": 0.5, "max_s": 8.0, "multiplier": 2.0, "jitter": "sdk"},
        "retry_after_ms": True,
        "retry_after_max_s": 120.0,
        "retry_after_above_max": "no_retry",
        "retry_after_integer_only": False,
        "retry_after_jitter_s": 0.0,
        "timeout_s": 600.0,
        "stream_timeout_s": None,
        "honours_deadline": False,
    },
    # anthropic 2.15.0: the same constants and backoff; _calculate_retry_timeout waits any
    # positive Retry-After (capped at 4,294,967 s, time.sleep's limit), retry-after-ms first;
    # _should_retry / _should_retry_exception: 408/409/429/5xx, connection errors and timeouts.
    # On a stream (messages.create(stream=True)) DEFAULT_TIMEOUT (600 s, connect 5 s) is kept
    # as httpx's read timeout (_calculate_nonstreaming_timeout runs only when not stream), so
    # no stream timeout of its own; a mid-stream SSE `error` event (overloaded_error after
    # HTTP 200) is raised by Stream.__stream__ as APIStatusError after the retry loop returned:
    # not retried (anthropics/anthropic-sdk-python#688).
    "anthropic": {
        "retries": 2,
        "retry_on": _SDK_RETRY_ON,
        "backoff": {"base_s": 0.5, "max_s": 8.0, "multiplier": 2.0, "jitter": "sdk"},
        "retry_after_ms": True,
        "retry_after_max_s": 4_294_967.0,
        "retry_after_above_max": "cap",
        "retry_after_integer_only": False,
        "retry_after_jitter_s": 0.0,
        "timeout_s": 600.0,
        "stream_timeout_s": None,
        "honours_deadline": False,
    },
    # litellm 1.110.2: calculate_retry_after: an integer Retry-After in (0, 60] is waited plus
    # JITTER * U (JITTER 0.75), else min(0.5 * 2^k, 8) + 0.75 U (INITIAL_RETRY_DELAY 0.5,
    # MAX_RETRY_DELAY 8.0); the header is read with int(), so retry-after-ms and fractional
    # values are ignored; should_retry: 408/409/429/5xx; DEFAULT_MAX_RETRIES 2;
    # request_timeout DEFAULT_REQUEST_TIMEOUT_SECONDS 6000 per attempt. stream_timeout
    # (litellm_core_utils/completion_timeout.py CompletionTimeout.for_stream) replaces the
    # request timeout on a live stream and bounds each read; unset by default (None: the
    # request timeout is the stream's read timeout).
    "litellm": {
        "retries": 2,
        "retry_on": _SDK_RETRY_ON,
        "backoff": {
            "base_s": 0.5,
            "max_s": 8.0,
            "multiplier": 2.0,
            "jitter": "additive",
            "jitter_s": 0.75,
        },
        "retry_after_ms": False,
        "retry_after_max_s": 60.0,
        "retry_after_above_max": "backoff",
        "retry_after_integer_only": True,
        "retry_after_jitter_s": 0.75,
        "timeout_s": 6000.0,
        "stream_timeout_s": None,
        "honours_deadline": False,
    },
}


def resolve(data: Any) -> Any:
    """The raw `sdk` value with its preset's values filled in (a preset name alone is the
    shorthand); `backoff` is merged key by key. Anything not a name or mapping passes through
    for the spec to reject."""
    if isinstance(data, str):
        data = {"preset": data}
    if not isinstance(data, dict):
        return data
    preset = data.get("preset", "none")
    base = PRESETS.get(preset) if isinstance(preset, str) else None
    if base is None:
        return data  # the spec names the allowed presets
    merged: dict[str, Any] = {**base, **data, "preset": preset}
    given = data.get("backoff")
    if isinstance(given, dict):
        merged["backoff"] = {**base["backoff"], **given}
    retry_on = merged.get("retry_on")
    if isinstance(retry_on, list):  # YAML reads 429 as a number
        merged["retry_on"] = tuple(str(x) if type(x) is int else x for x in retry_on)
    return merged
