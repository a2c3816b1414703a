"""Which keys of a LiteLLM config the import reads, and how a typo of one is told from a key of
LiteLLM's own that it does not model.

A key the import does not read is listed as not imported, unless it is close (by `difflib`, as
unknown scenario keys are) to a key it reads and is no key of LiteLLM's own: then it is a typo
(`litellm_params.tmp` for `tpm` would quietly leave a deployment without its quota) and an error
with a did-you-mean. LiteLLM's keys that are close to a read key (`tpd`, its tokens per day, is
close to `tpm`) are listed in `LITELLM_NEIGHBOURS`, taken from LiteLLM 1.110.2's types and
signatures (`tests/adapters/litellm_reference.py` recomputes them from the installed package).
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import get_close_matches

#: The release the neighbours (and the price map) are LiteLLM's of.
LITELLM_RELEASE = "1.110.2"

#: Per mapping of a config, the keys the import reads whose typo would go unnoticed (a quota, a
#: weight, a timeout, a retry count). Prices (`base_model`, `input_cost_per_token`, ...) are read
#: too but are no typo targets: a price not found is a placeholder, said in the header and by
#: every run.
READS: dict[str, tuple[str, ...]] = {
    "top": ("model_list", "router_settings", "litellm_settings"),
    "deployment": ("model_name", "litellm_params", "model_info", "tpm", "rpm"),
    "litellm_params": (
        "model", "rpm", "tpm", "weight", "timeout", "cooldown_time", "max_retries",
    ),
    "model_info": ("id",),
    "router_settings": (
        "routing_strategy", "num_retries", "max_fallbacks", "timeout", "cooldown_time",
        "retry_after", "allowed_fails", "disable_cooldowns", "retry_policy",
        "allowed_fails_policy", "fallbacks", "routing_strategy_args",
    ),
    "litellm_settings": (
        "routing_strategy", "num_retries", "max_fallbacks", "request_timeout", "retry_policy",
        "allowed_fails_policy", "fallbacks",
    ),
    "routing_strategy_args": ("lowest_latency_buffer", "max_latency_list_size"),
    "retry_policy": (
        "RateLimitErrorRetries", "TimeoutErrorRetries", "InternalServerErrorRetries",
        "DefaultRetries",
    ),
    "allowed_fails_policy": ("RateLimitErrorAllowedFails", "TimeoutErrorAllowedFails"),
}  # fmt: skip

#: LiteLLM 1.110.2's own keys, per mapping, that are close to a key the import reads there but
#: are not read: never taken for a typo (tests/integration/test_litellm_typos.py holds this to the
#: installed LiteLLM).
LITELLM_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "top": ("general_settings",),
    "deployment": (),
    "litellm_params": (
        "base_model", "force_timeout", "itpm", "mock_timeout", "model_info", "model_list",
        "num_retries", "order", "otpm", "request_timeout", "rpd", "stream_timeout", "tpd",
    ),
    "model_info": (),
    "router_settings": (
        "default_fallbacks", "fallback_access_check", "max_retries", "model_group_retry_policy",
        "routing_groups", "stream_timeout",
    ),
    "litellm_settings": (
        "allowed_fails", "audit_log_callbacks", "callback_settings", "callbacks",
        "default_fallbacks", "failure_callback", "get_configured_request_timeout",
        "input_callback", "model_fallbacks", "num_retries_per_request", "repositories",
        "request_timeout_explicitly_set", "router_strategy",
    ),
    "routing_strategy_args": (),
    "retry_policy": (
        "AuthenticationErrorRetries", "BadRequestErrorRetries", "NotFoundErrorRetries",
        "ServiceUnavailableErrorRetries",
    ),
    "allowed_fails_policy": (
        "AuthenticationErrorAllowedFails", "BadGatewayErrorAllowedFails",
        "BadRequestErrorAllowedFails", "ContentPolicyViolationErrorAllowedFails",
        "InternalServerErrorAllowedFails", "NotFoundErrorAllowedFails",
        "ServiceUnavailableErrorAllowedFails",
    ),
}  # fmt: skip


def typo_of(key: str, where: str) -> str | None:
    """The read key that `key` (not read at `where`) is likely a typo of, or None: it is close
    to one and is no key of LiteLLM's own there."""
    if key in LITELLM_NEIGHBOURS.get(where, ()):
        return None
    close = get_close_matches(key, list(READS[where]), n=1)
    return close[0] if close else None


def typo_message(key: str, match: str, where: str, reads: Sequence[str] = ()) -> str:
    """'unknown key (did you mean 'tpm'? ...)': the error for a likely typo."""
    read = ", ".join(reads or READS[where])
    return (
        f"unknown key (did you mean '{match}'? not a LiteLLM {LITELLM_RELEASE} key here, so "
        f"it would be ignored; the import reads: {read})"
    )
