"""A LiteLLM proxy/router config turned into scenario data: `tailsim import litellm`.

`import_litellm` reads the parsed config (`model_list`, `router_settings`, `litellm_settings`)
and returns the scenario as plain data: one model per model group, one provider per deployment
(its `rpm`/`tpm` as the provider's quota, placeholder latency the user edits, the client's own
retries off as behind LiteLLM's Router), a policy `litellm` of kind `router` with the router's
settings, and a one-step placeholder workflow. Every key it does not model is returned in a
list (path and why), never dropped silently; a value it cannot read, or a likely typo of a key
it reads (`litellm_params.tmp`: did you mean `tpm`?, `sim.adapters.litellm_keys`), is a
`ScenarioError` naming the file and key path. Each model group's price is its deployments'
(custom pricing, else LiteLLM's list price: `sim.adapters.litellm_prices`); a group with none
known has no price, said in `Imported.prices`. Precedence as LiteLLM's: `router_settings` over
`litellm_settings`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from sim.adapters.litellm_keys import typo_message, typo_of
from sim.adapters.litellm_prices import (
    COST_KEYS,
    PRICE_SOURCE,
    Price,
    custom_price,
    list_price,
)
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
    """The scenario data, the keys not imported (path: why), renamed names, and per model group
    where its price came from (or that it has none: a placeholder)."""

    scenario: dict[str, Any]
    skipped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    prices: list[str] = field(default_factory=list)

    @property
    def unpriced(self) -> list[str]:
        """The model groups without a known price (their calls cost $0 until one is set)."""
        models = self.scenario["models"]
        return [name for name, spec in models.items() if "price_per_mtok" not in spec]

    def price_header(self) -> list[str]:
        """The header's lines on prices: where each group's came from, placeholders loudly."""
        lines = [
            "# - prices (price_per_mtok, USD per million tokens) are LIST prices from",
            f"#   {PRICE_SOURCE} where a deployment's model is in it (your contract may",
            "#   differ); a group with none known has NO PRICE, a PLACEHOLDER: its calls cost $0",
            "#   and every run says so:",
        ]
        return lines + [f"#   {line}" for line in self.prices]


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

    def other(self, path: Path, where: str, why: str) -> None:
        """A key the import does not read in mapping `where`: an error with a did-you-mean if
        it is likely a typo of one it reads, else listed as not imported (`why`)."""
        key = str(path[-1])
        match = typo_of(key, where)
        if match is not None:
            raise self.fail(path, typo_message(key, match, where))
        self.skip(path, why)


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
            read.other((key,), "top", "not modelled (the simulation has no use for it)")
    deployments = top.get("model_list")
    if not isinstance(deployments, list) or not deployments:
        raise read.fail(("model_list",), "must be a non-empty list of deployments")
    renamed: dict[str, str] = {}
    groups: dict[str, list[dict[str, Any]]] = {}
    providers: dict[str, Any] = {}
    found: dict[str, list[tuple[str, Price | None]]] = {}
    for i, entry in enumerate(deployments):
        group, provider, spec, router_entry, price = _deployment(read, entry, i, holders, renamed)
        if provider in providers:
            provider = f"{provider}-{i}"
        providers[provider] = spec
        groups.setdefault(group, []).append({"provider": provider, **router_entry})
        found.setdefault(group, []).append((provider, price))
    models, prices = _prices(found)
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
        "models": models,
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
    return Imported(scenario, skipped, {k: v for k, v in renamed.items() if k != v}, prices)


def _prices(
    found: dict[str, list[tuple[str, Price | None]]],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each group's model spec (its price where one is known) and a line per group saying
    where the price came from. Deployments of a group that differ: the highest input and
    output prices (a cost never understated); none known: no price, a placeholder."""
    models: dict[str, dict[str, Any]] = {}
    lines = []
    for group, pairs in found.items():
        known = [(p, price) for p, price in pairs if price is not None]
        missing = [p for p, price in pairs if price is None]
        if not known:
            models[group] = {}
            lines.append(
                f"{group}: NO PRICE KNOWN (no custom pricing, no list price for its model in "
                "LiteLLM's price map): a PLACEHOLDER of $0, so every $ figure leaves its calls "
                f"out; set models.{group}.price_per_mtok"
            )
            continue
        price = Price(
            max(price.input for _, price in known),
            max(price.output for _, price in known),
            "; ".join(dict.fromkeys(price.source for _, price in known)),
        )
        models[group] = {"price_per_mtok": price.as_spec()}
        per = f"${price.input:g} / ${price.output:g}"
        line = f"{group}: {per} per million tokens in / out, from {price.source}"
        if len({(q.input, q.output) for _, q in known}) > 1:
            line += " (its deployments differ: the highest of each)"
        if missing:
            line += f"; no price known for deployment {', '.join(missing)}"
        lines.append(line)
    return models, lines


def _deployment(
    read: _Reader, entry: Any, i: int, holders: Placeholders, renamed: dict[str, str]
) -> tuple[str, str, dict[str, Any], dict[str, Any], Price | None]:
    """One `model_list` entry: (group, provider name, provider spec, router deployment keys,
    its price if known)."""
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
    costs = {"litellm_params": {}, "model_info": {}}  # custom pricing, USD per token
    for key in info:
        if key in (*COST_KEYS, "base_model"):
            costs["model_info"][key] = info[key]
        elif key != "id":
            read.other((*at, "model_info", key), "model_info", "not modelled")
    for key in entry:
        if key not in ("model_name", "litellm_params", "model_info", "tpm", "rpm"):
            read.other((*at, key), "deployment", "not modelled")
    limits: dict[str, Any] = {}
    router_entry: dict[str, Any] = {}
    for key in ("rpm", "tpm"):
        value = params.get(key, entry.get(key))
        where = (*at, "litellm_params", key) if key in params else (*at, key)
        if value is not None:
            limits[key] = router_entry[key] = read.number(value, where, integer=True, low=1)
    sdk: dict[str, Any] = {"preset": "litellm", "retries": 0}
    for key, value in params.items():
        where: Path = (*at, "litellm_params", key)
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
        elif key in (*COST_KEYS, "base_model"):
            costs["litellm_params"][key] = value
        elif key in ("api_key", "api_base", "api_version", "organization"):
            read.skip(where, "ignored (where and how to call: no effect on the simulation)")
        else:
            read.other(where, "litellm_params", "not modelled")
    serving = {
        "ttft_s": {"median": holders.ttft_median_s, "p99": holders.ttft_p99_s},
        "tokens_per_s": {"median": holders.tokens_per_s, "p99": 2 * holders.tokens_per_s},
    }
    spec = {**limits, "sdk": sdk, "serves": {group: serving}}
    return group, provider, spec, router_entry, _price(read, at, params["model"], costs)


def _price(read: _Reader, at: Path, model: str, costs: dict[str, dict[str, Any]]) -> Price | None:
    """A deployment's price, as LiteLLM's cost tracking finds it: custom pricing (litellm_params
    before model_info), else the list price of its base_model or model string."""
    for where in ("litellm_params", "model_info"):
        for key in COST_KEYS:
            if key in costs[where]:
                read.number(costs[where][key], (*at, where, key))
    base = None
    for where in ("model_info", "litellm_params"):  # litellm_params wins, as for pricing
        if "base_model" in costs[where]:
            base = costs[where]["base_model"]
            if not isinstance(base, str):
                raise read.fail((*at, where, "base_model"), "must be a model name (a string)")
    return custom_price(costs["litellm_params"], costs["model_info"]) or list_price(model, base)


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
            policy[target] = _counts(read, read.mapping(value, at), at, fields, target)
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
            read.other(at, "routing_strategy_args", "not modelled")
    used = {
        "routing_strategy", "num_retries", "max_fallbacks", "timeout", "cooldown_time",
        "retry_after", "allowed_fails", "disable_cooldowns", "retry_policy",
        "allowed_fails_policy", "fallbacks", "routing_strategy_args",
    }  # fmt: skip
    for key in settings:
        if key not in used:
            read.other(("router_settings", key), "router_settings", "not modelled")
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
            read.other(("litellm_settings", key), "litellm_settings", "not modelled")
        elif module_used[key] in settings:
            read.skip(("litellm_settings", key), "overridden by router_settings")
    return policy


def _counts(
    read: _Reader, value: dict[str, Any], at: Path, fields: tuple[str, ...], where: str
) -> dict:
    """The fields of a retry or allowed-fails policy the router kind reads; the rest listed."""
    kept: dict[str, int] = {}
    for key, count in value.items():
        if key in fields:
            if count is not None:
                kept[key] = int(read.number(count, (*at, key), integer=True))
        else:
            read.other(
                (*at, key), where, "not modelled (a failure the simulated provider never gives)"
            )
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
