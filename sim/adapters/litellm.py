"""A LiteLLM proxy/router config turned into scenario data: `tailsim import litellm`.

`import_litellm` reads the parsed config (`model_list`, `router_settings`, `litellm_settings`)
and returns the scenario as plain data: one model per model group, one provider per deployment
(its `rpm`/`tpm` as the provider's quota, placeholder latency the user edits, the client's own
retries off as behind LiteLLM's Router), a policy `litellm` of kind `router` with the router's
settings, and a one-step placeholder workflow. Every key it does not model is returned in a
list (path and why), never dropped silently; a value it cannot read is a `ScenarioError`
naming the file and key path. Precedence as LiteLLM's: `router_settings` over `litellm_settings`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from sim.model.config.router import LITELLM_ALLOWED_FAILS
from sim.model.errors import Path, ScenarioError, format_path

#: The routing strategies the `router` kind runs (LiteLLM's names).
STRATEGIES = (
    "simple-shuffle",
    "least-busy",
    "latency-based-routing",
    "usage-based-routing",
    "usage-based-routing-v2",
)
#: retry_policy / allowed_fails_policy fields the router kind reads (the others are for
#: failures the simulated provider never produces).
RETRY_FIELDS = (
    "RateLimitErrorRetries",
    "TimeoutErrorRetries",
    "InternalServerErrorRetries",
    "DefaultRetries",
)
ALLOWED_FAILS_FIELDS = ("RateLimitErrorAllowedFails", "TimeoutErrorAllowedFails")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Placeholders:
    """What the import cannot know and writes as placeholders: latency, the workflow."""

    ttft_median_s: float = 0.5
    ttft_p99_s: float = 2.0
    tokens_per_s: float = 60.0
    input_tokens: int = 1000
    output_tokens: int = 200
    deadline_s: float = 30.0
    rate_per_s: float = 1.0


@dataclass
class Imported:
    """The scenario data, the keys not imported (path: why), and renamed names."""

    scenario: dict[str, Any]
    skipped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)


class _Reader:
    """Typed reads from the config with errors naming the file and key path."""

    def __init__(self, source: str, skipped: list[str]) -> None:
        self.source = source
        self.skipped = skipped

    def fail(self, path: Path, message: str) -> ScenarioError:
        return ScenarioError(self.source, [("", f"{format_path(path)}: {message}")])

    def mapping(self, value: Any, path: Path) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a mapping, got {type(value).__name__}")
        return value

    def number(
        self, value: Any, path: Path, integer: bool = False, low: float = 0, above: bool = False
    ) -> float:
        """A number >= `low` (> `low` with `above`), an integer with `integer`."""
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok and ((integer and not float(value).is_integer()) or value < low):
            ok = False
        if not ok or (above and value <= low):
            kind = "an integer" if integer else "a number"
            raise self.fail(path, f"must be {kind} {'>' if above else '>='} {low:g}, got {value!r}")
        return int(value) if integer else float(value)

    def skip(self, path: Path, why: str) -> None:
        self.skipped.append(f"{format_path(path)}: {why}")


def name_of(raw: str) -> str:
    """A scenario name for a LiteLLM name ('openai/gpt-4o' -> 'openai-gpt-4o')."""
    return _NAME.sub("-", raw).strip("-") or "unnamed"


def import_litellm(data: Any, source: str, placeholders: Placeholders | None = None) -> Imported:
    """The scenario data of a LiteLLM config (see the module docstring)."""
    holders = placeholders or Placeholders()
    skipped: list[str] = []
    read = _Reader(source, skipped)
    top = read.mapping(data, ())
    for key in top:
        if key not in ("model_list", "router_settings", "litellm_settings"):
            read.skip((key,), "not modelled (the simulation has no use for it)")
    deployments = top.get("model_list")
    if not isinstance(deployments, list) or not deployments:
        raise read.fail(("model_list",), "must be a non-empty list of deployments")
    renamed: dict[str, str] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    providers: dict[str, Any] = {}
    for i, entry in enumerate(deployments):
        group, provider, spec, router_entry = _deployment(read, entry, i, holders, renamed)
        if provider in providers:
            provider = f"{provider}-{i}"
        providers[provider] = spec
        groups.setdefault(group, []).append({"provider": provider, **router_entry})
    router = _router(read, top, groups, renamed)
    first = next(iter(groups))
    # the placeholder call must fit every quota, or no call would ever be admitted
    tokens = min([holders.input_tokens + holders.output_tokens]
                 + [p["tpm"] for p in providers.values() if "tpm" in p])  # fmt: skip
    output = max(
        1, tokens * holders.output_tokens // (holders.input_tokens + holders.output_tokens)
    )
    scenario = {
        "name": "litellm-import",
        "description": f"Imported from {source} by tailsim import litellm.",
        "seed": 1,
        "deadline_s": holders.deadline_s,
        "requests": 1000,
        "arrivals": {"kind": "poisson", "rate_per_s": holders.rate_per_s},
        "models": {group: {} for group in groups},
        "providers": providers,
        "workflow": {
            "steps": [
                {
                    "id": "call",
                    "model": first,
                    "input_tokens": max(0, tokens - output),
                    "output_tokens": output,
                }
            ]
        },
        "policies": {"litellm": router},
    }
    return Imported(scenario, skipped, {k: v for k, v in renamed.items() if k != v})


def _deployment(
    read: _Reader, entry: Any, i: int, holders: Placeholders, renamed: dict[str, str]
) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """One `model_list` entry: (group, provider name, provider spec, router deployment keys)."""
    at: Path = ("model_list", i)
    entry = read.mapping(entry, at)
    raw_group = entry.get("model_name")
    if not isinstance(raw_group, str) or not raw_group:
        raise read.fail((*at, "model_name"), "must be the model group's name (a string)")
    group = renamed.setdefault(raw_group, name_of(raw_group))
    params = read.mapping(entry.get("litellm_params"), (*at, "litellm_params"))
    if not isinstance(params.get("model"), str):
        raise read.fail((*at, "litellm_params", "model"), "must be the deployment's model string")
    info = read.mapping(entry.get("model_info"), (*at, "model_info"))
    ident = info.get("id")
    provider = name_of(str(ident)) if ident is not None else f"{group}-{i + 1}"
    for key in info:
        if key != "id":
            read.skip((*at, "model_info", key), "not modelled")
    for key in entry:
        if key not in ("model_name", "litellm_params", "model_info", "tpm", "rpm"):
            read.skip((*at, key), "not modelled")
    limits: dict[str, Any] = {}
    router_entry: dict[str, Any] = {}
    for key in ("rpm", "tpm"):
        value = params.get(key, entry.get(key))
        where = (*at, "litellm_params", key) if key in params else (*at, key)
        if value is not None:
            limits[key] = router_entry[key] = read.number(value, where, integer=True, low=1)
    sdk: dict[str, Any] = {"preset": "litellm", "retries": 0}
    for key, value in params.items():
        where = (*at, "litellm_params", key)
        if key in ("model", "rpm", "tpm"):
            continue
        if key == "weight":
            router_entry["weight"] = read.number(value, where, above=True)
        elif key == "timeout":
            router_entry["timeout_s"] = read.number(value, where, above=True)
        elif key == "cooldown_time":
            router_entry["cooldown_time_s"] = read.number(value, where)
        elif key == "max_retries":
            retries = int(read.number(value, where, integer=True))
            if retries:  # the deployment's own openai client retries inside each router call
                sdk = {"preset": "openai", "retries": retries}
        elif key in ("api_key", "api_base", "api_version", "organization", "base_model"):
            read.skip(where, "ignored (where and how to call: no effect on the simulation)")
        else:
            read.skip(where, "not modelled")
    serving = {
        "ttft_s": {"median": holders.ttft_median_s, "p99": holders.ttft_p99_s},
        "tokens_per_s": {"median": holders.tokens_per_s, "p99": 2 * holders.tokens_per_s},
    }
    spec = {**limits, "sdk": sdk, "serves": {group: serving}}
    return group, provider, spec, router_entry


def _router(
    read: _Reader,
    top: dict[str, Any],
    groups: dict[str, list[dict[str, Any]]],
    renamed: dict[str, str],
) -> dict[str, Any]:
    """The `router` policy from `router_settings` (and `litellm_settings` where LiteLLM reads
    the same setting from there)."""
    settings = read.mapping(top.get("router_settings"), ("router_settings",))
    module = read.mapping(top.get("litellm_settings"), ("litellm_settings",))
    policy: dict[str, Any] = {"kind": "router", "litellm_version": "1.110", "deployments": groups}

    def pick(key: str, module_key: str | None = None) -> tuple[Any, Path]:
        if key in settings:
            return settings[key], ("router_settings", key)
        module_key = module_key or key
        if module_key in module:
            return module[module_key], ("litellm_settings", module_key)
        return None, ()

    value, at = pick("routing_strategy")
    if value is not None:
        if value not in STRATEGIES:
            raise read.fail(at, f"{value!r} is not modelled (allowed: {', '.join(STRATEGIES)})")
        policy["routing_strategy"] = value
    for key, target in (("num_retries", "num_retries"), ("max_fallbacks", "max_fallbacks")):
        value, at = pick(key)
        if value is not None:
            policy[target] = int(read.number(value, at, integer=True))
    value, at = pick("timeout", "request_timeout")
    if value is not None:
        policy["timeout_s"] = read.number(value, at, above=True)
    for key, target, above in (
        ("cooldown_time", "cooldown_time_s", True),
        ("retry_after", "retry_after_s", False),
    ):
        if key in settings:
            policy[target] = read.number(settings[key], ("router_settings", key), above=above)
    if "allowed_fails" in settings:
        at = ("router_settings", "allowed_fails")
        policy["allowed_fails"] = int(read.number(settings["allowed_fails"], at, integer=True))
    if "disable_cooldowns" in settings:
        policy["disable_cooldowns"] = bool(settings["disable_cooldowns"])
    for key, fields, target in (
        ("retry_policy", RETRY_FIELDS, "retry_policy"),
        ("allowed_fails_policy", ALLOWED_FAILS_FIELDS, "allowed_fails_policy"),
    ):
        value, at = pick(key)
        if value is not None:
            policy[target] = _counts(read, read.mapping(value, at), at, fields)
    value, at = pick("fallbacks")
    if value is not None:
        policy["fallbacks"] = _fallbacks(read, value, at, groups, renamed)
    args_at: Path = ("router_settings", "routing_strategy_args")
    args = read.mapping(settings.get("routing_strategy_args"), args_at)
    for key, arg in args.items():
        at = (*args_at, key)
        if key == "lowest_latency_buffer":
            policy["lowest_latency_buffer"] = read.number(arg, at)
        elif key == "max_latency_list_size":
            policy["max_latency_list_size"] = int(read.number(arg, at, integer=True, low=1))
        else:
            read.skip(at, "not modelled")
    used = {
        "routing_strategy", "num_retries", "max_fallbacks", "timeout", "cooldown_time",
        "retry_after", "allowed_fails", "disable_cooldowns", "retry_policy",
        "allowed_fails_policy", "fallbacks", "routing_strategy_args",
    }  # fmt: skip
    for key in settings:
        if key not in used:
            read.skip(("router_settings", key), "not modelled")
    module_used = {  # litellm_settings key -> the router_settings key that overrides it
        "routing_strategy": "routing_strategy", "num_retries": "num_retries",
        "max_fallbacks": "max_fallbacks", "request_timeout": "timeout",
        "retry_policy": "retry_policy", "allowed_fails_policy": "allowed_fails_policy",
        "fallbacks": "fallbacks",
    }  # fmt: skip
    for key in module:
        if key == "allowed_fails":
            read.skip(
                ("litellm_settings", key),
                f"not modelled (litellm.allowed_fails: the default, {LITELLM_ALLOWED_FAILS}, the "
                "router compares its own with; set router_settings.allowed_fails)",
            )
        elif key not in module_used:
            read.skip(("litellm_settings", key), "not modelled")
        elif module_used[key] in settings:
            read.skip(("litellm_settings", key), "overridden by router_settings")
    return policy


def _counts(read: _Reader, value: dict[str, Any], at: Path, fields: tuple[str, ...]) -> dict:
    """The fields of a retry or allowed-fails policy the router kind reads; the rest listed."""
    kept: dict[str, int] = {}
    for key, count in value.items():
        if key in fields:
            if count is not None:
                kept[key] = int(read.number(count, (*at, key), integer=True))
        else:
            read.skip((*at, key), "not modelled (a failure the simulated provider never gives)")
    return kept


def _fallbacks(
    read: _Reader,
    value: Any,
    at: Path,
    groups: dict[str, list[dict[str, Any]]],
    renamed: dict[str, str],
) -> dict[str, list[str]]:
    """LiteLLM's `[{group: [fallback groups]}, ...]` as a mapping (first entry per group wins,
    as `get_fallback_model_group` finds it)."""
    if not isinstance(value, list):
        raise read.fail(at, "must be a list of {model_group: [fallback groups]} entries")
    out: dict[str, list[str]] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or len(item) != 1:
            raise read.fail((*at, i), "must be a one-key mapping {model_group: [groups]}")
        ((raw, targets),) = item.items()
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise read.fail((*at, i, raw), "must be a list of model group names")
        group = "*" if raw == "*" else renamed.get(raw, name_of(str(raw)))
        for j, target in enumerate(targets):
            if renamed.get(target, name_of(target)) not in groups:
                known = ", ".join(renamed)
                raise read.fail(
                    (*at, i, raw, j), f"unknown model group {target!r} (known: {known})"
                )
        if group != "*" and group not in groups:
            raise read.fail((*at, i, raw), f"unknown model group {raw!r}")
        out.setdefault(group, [renamed.get(t, name_of(t)) for t in targets])
    return out
