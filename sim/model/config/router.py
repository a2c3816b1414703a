"""The `router` policy kind's parts: LiteLLM Router deployments, retry and allowed-fails policies.

The `router` kind (`RouterPolicy` in `sim.model.config.policies`) runs a step as LiteLLM's
Router does (litellm 1.110.2 or 1.80.0, `litellm_version`): its keys use LiteLLM's names where
they exist (`num_retries`, `retry_policy`, `fallbacks`, `allowed_fails`, ...). This module
holds the pieces (a deployment, the per-exception retry and allowed-fails counts, the routing
strategies) and the cross-reference checks on plain data (`router_problems`); executing it is
`sim.policy.kinds.router`'s job. Defaults are LiteLLM's (`litellm/constants.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from sim.model.config.base import Name, NonNegativeFloat, PositiveFloat, Spec
from sim.model.errors import Path

#: LiteLLM's routing strategies that the `router` kind runs (`Router(routing_strategy=...)`).
RoutingStrategy = Literal[
    "simple-shuffle",
    "least-busy",
    "latency-based-routing",
    "usage-based-routing",
    "usage-based-routing-v2",
]
Count = Annotated[int, Field(ge=0)]


class DeploymentSpec(Spec):
    """One deployment of a model group: the provider that serves it and its `litellm_params`
    the router reads (weights and limits for routing, its own timeout and cooldown)."""

    provider: Name = Field(description="the provider this deployment calls (serves the group)")
    weight: PositiveFloat | None = Field(
        default=None, description="simple-shuffle pick weight (litellm_params.weight)"
    )
    rpm: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="the deployment's requests per minute as the router knows it: a "
        "simple-shuffle weight, a usage-based limit",
    )
    tpm: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="the deployment's tokens per minute as the router knows it: a "
        "simple-shuffle weight, a usage-based limit",
    )
    timeout_s: PositiveFloat | None = Field(
        default=None, description="per-call timeout of this deployment; none: the router's"
    )
    cooldown_time_s: NonNegativeFloat | None = Field(
        default=None,
        description="this deployment's cooldown, s (ahead of a 429's Retry-After and the "
        "router's cooldown_time_s)",
    )


class RetryPolicySpec(Spec):
    """LiteLLM's `RetryPolicy`: retries by the type of a group's FIRST failure, in place of
    `num_retries` (none: not set)."""

    RateLimitErrorRetries: Count | None = None
    TimeoutErrorRetries: Count | None = None
    InternalServerErrorRetries: Count | None = None
    DefaultRetries: Count | None = None


class AllowedFailsPolicySpec(Spec):
    """LiteLLM's `AllowedFailsPolicy`: allowed fails by the failure's type (none: not set; 0
    falls through to `allowed_fails`, as LiteLLM's `or` does)."""

    RateLimitErrorAllowedFails: Count | None = None
    TimeoutErrorAllowedFails: Count | None = None


#: LiteLLM's constants the wait is computed from (litellm/constants.py).
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
JITTER_S = 0.75
DEFAULT_COOLDOWN_TIME_S = 5.0
#: litellm.allowed_fails: an `allowed_fails` equal to it counts as "not set" (v2 cooldown rule).
LITELLM_ALLOWED_FAILS = 3


def router_problems(
    name: str, policy: dict[str, Any], models: set[str], serves: dict[str, set[str]]
) -> list[tuple[Path, str]]:
    """Cross-reference problems of a `router` policy on plain data: each group is a model, each
    deployment's provider exists and serves it, each fallback group is a model."""
    problems: list[tuple[Path, str]] = []
    groups = policy.get("deployments")
    if isinstance(groups, dict):
        for group, deployments in groups.items():
            where: Path = ("policies", name, "deployments", group)
            if models and group not in models:
                problems.append((where, f"unknown model group '{group}' (groups are models)"))
            for j, entry in enumerate(deployments if isinstance(deployments, list) else []):
                provider = entry.get("provider") if isinstance(entry, dict) else None
                if not isinstance(provider, str) or not serves:
                    continue
                if provider not in serves:
                    known = ", ".join(sorted(serves))
                    problems.append(
                        ((*where, j, "provider"), f"unknown provider '{provider}' (known: {known})")
                    )
                elif group not in serves[provider]:
                    problems.append(
                        ((*where, j, "provider"), f"provider '{provider}' does not serve '{group}'")
                    )
    fallbacks = policy.get("fallbacks")
    if isinstance(fallbacks, dict) and models:
        for group, targets in fallbacks.items():
            if group != "*" and group not in models:
                where = ("policies", name, "fallbacks", group)
                problems.append((where, f"unknown model group '{group}'"))
            for j, target in enumerate(targets if isinstance(targets, list) else []):
                if isinstance(target, str) and target not in models:
                    where = ("policies", name, "fallbacks", group, j)
                    problems.append((where, f"unknown model group '{target}'"))
                elif (
                    isinstance(target, str)
                    and serves
                    and not any(target in served for served in serves.values())
                ):
                    where = ("policies", name, "fallbacks", group, j)
                    problems.append((where, f"no provider serves model '{target}'"))
    return problems
