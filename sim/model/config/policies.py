"""Policies and controls: how a step is executed and how load is kept in check.

Owns every policy kind's fields (wait, cut, race, hedge, downshift, adaptive, draft, and the
`per_step` map), what they all share (per-step overrides, deadline propagation, admission),
and the load-aware controls (hedge cap, retry budget, breaker, AIMD, shed). The tables at the
end (`PolicySpec`, `PlainPolicy`, `THRESHOLD_FIELDS`, `MODEL_FIELDS`) are what the pilot, the
per-step resolution and the checks read. Executing a policy is `sim.policy`'s job.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from sim.model.config.base import (
    ExpectedTimes,
    Name,
    NonNegativeFloat,
    PositiveFloat,
    Spec,
    Threshold,
)
from sim.model.config.providers import BackoffSpec
from sim.model.config.router import (
    DEFAULT_COOLDOWN_TIME_S,
    AllowedFailsPolicySpec,
    DeploymentSpec,
    RetryPolicySpec,
    RoutingStrategy,
)
from sim.model.errors import FieldError


class AdmissionSpec(Spec):
    """Deadline-aware admission: an attempt (a policy retry, a hedge, an SDK retry, a tool
    submit or a step's first attempt) starts only if the time left exceeds its backoff wait
    plus the `expected` attempt time (plus `workflow.reserve_s`, already kept back)."""

    expected: ExpectedTimes = Field(
        default="p50",
        description="expected attempt time: seconds, 'pNN' or 'K x pNN' of the step's pilot "
        "latency, or a mapping of step id (or 'default') to one of those",
    )


class HedgeCapSpec(Spec):
    """Finagle's backup-request cap (`maxExtraLoad`): extra parallel attempts (hedges, race
    extras) may add at most `max_extra` of the primary calls sent in the last `window_s`."""

    max_extra: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.05, description="hedges allowed per primary call over the window (0.05 = 5%)"
    )
    window_s: PositiveFloat = Field(default=10.0, description="sliding window, s")


class RetryBudgetSpec(Spec):
    """gRPC retry throttling (gRFC A6 `retryThrottling`): a token count starts at `max_tokens`;
    every failed attempt takes 1, every success gives back `token_ratio` (capped at
    `max_tokens`); retries and hedges are sent only while the count is above `max_tokens / 2`."""

    max_tokens: PositiveFloat = Field(default=10.0, description="the count's start and cap")
    token_ratio: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.1, description="tokens a successful attempt gives back"
    )


class BreakerSpec(Spec):
    """A circuit breaker per provider (LiteLLM-style cooldown): after `failures` failed calls
    within `window_s`, attempts routed to the provider are refused at the client for
    `cooldown_s` (no call is made; the policy goes on to its next attempt)."""

    failures: Annotated[int, Field(ge=1)] = Field(
        default=3, description="failed calls within window_s that open the breaker"
    )
    window_s: PositiveFloat = Field(default=60.0, description="window the failures count in, s")
    cooldown_s: PositiveFloat = Field(default=5.0, description="how long it stays open, s")
    count: list[Literal["rate_limited", "error", "timeout", "invalid"]] = Field(
        default_factory=lambda: ["rate_limited", "error", "timeout"],
        description="call outcomes that count as failures",
    )


class AimdSpec(Spec):
    """Client-side concurrency per provider, AIMD: calls beyond the limit wait at the client;
    the limit is multiplied by `decrease` on a 429 (at most once per `decrease_every_s`) and
    grows by `increase / limit` per success (about +`increase` per limit's worth of successes)."""

    initial: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 16.0
    min: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0
    max: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 256.0
    increase: PositiveFloat = Field(default=1.0, description="additive step per limit successes")
    decrease: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.5, description="factor on the limit after a 429"
    )
    decrease_every_s: NonNegativeFloat = Field(
        default=1.0, description="at most one decrease per this many seconds (TCP: per RTT)"
    )

    @model_validator(mode="after")
    def _ordered(self) -> AimdSpec:
        if not self.min <= self.initial <= self.max:
            raise FieldError(
                ("initial",),
                f"must lie between min ({self.min:g}) and max ({self.max:g}), got {self.initial:g}",
            )
        return self


class ShedSpec(Spec):
    """Shed, at its arrival, a run that cannot make its deadline: its expected time (the mean
    time of each step over the last `window_s`, a failed step counted at deadline_s as a miss,
    summed along the workflow's longest path) times `margin` reaches the deadline. With fewer
    than `min_samples` step times in the window the run is admitted (so shedding never locks
    itself in)."""

    window_s: PositiveFloat = Field(default=30.0, description="how far back step times count, s")
    margin: PositiveFloat = Field(
        default=1.0, description="shed when expected time x margin >= deadline_s"
    )
    min_samples: Annotated[int, Field(ge=1)] = Field(
        default=5, description="step times needed in the window before anything is shed"
    )
    on_429_share: Annotated[float, Field(ge=0, lt=1)] | None = Field(
        default=None,
        description="also shed while the share of the policy's attempts answered with a 429 "
        "over the last window_s exceeds this (min_samples attempts needed); none: off",
    )


class RateLimitShareSpec(Spec):
    """No hedge or extra race attempt to a provider while the share of the policy's attempts
    on it answered with a 429 over the last `window_s` exceeds `share` (with at least
    `min_samples` attempts ended in the window)."""

    share: Annotated[float, Field(ge=0, lt=1)] = Field(
        description="429-answered attempts / attempts ended in the window above which hedging "
        "to the provider stops"
    )
    window_s: PositiveFloat = Field(default=10.0, description="how far back attempts count, s")
    min_samples: Annotated[int, Field(ge=1)] = Field(
        default=5, description="attempts needed in the window before hedging is stopped"
    )


class ControlsSpec(Spec):
    """Load-aware controls of one policy; each is off unless given. Their state is shared by
    every request of the policy's simulation (and never across policies)."""

    hedge_cap: HedgeCapSpec | None = None
    retry_budget: RetryBudgetSpec | None = None
    breaker: BreakerSpec | None = None
    aimd: AimdSpec | None = None
    stop_hedging_on_429_s: PositiveFloat | None = Field(
        default=None,
        description="no hedge or extra race attempt to a provider for this long after its last 429",
    )
    shed: ShedSpec | None = None
    stop_hedging_on_429_share: RateLimitShareSpec | None = Field(
        default=None,
        description="no hedge or extra race attempt to a provider while its recent 429 share "
        "exceeds a threshold",
    )


#: A step's entry in a policy's `steps:` map: another policy's name, a full policy (with
#: `kind`), or keys of this policy to override for that step.
StepOverride = Name | dict[str, Any]


class PolicyBase(Spec):
    """What every policy kind shares: per-step overrides, load-aware controls, and how the
    request's deadline reaches its work (propagation, deadline-aware admission). The deadline
    keys and controls are the whole policy's: a step's entry cannot set the deadline keys."""

    steps: dict[Name, StepOverride] | None = Field(
        default=None,
        description="per step: a policy name, a policy with `kind`, or keys of this one to "
        "override",
    )
    controls: ControlsSpec | None = Field(
        default=None, description="load-aware controls: hedge cap, retry budget, breaker, ..."
    )
    propagate_deadline: bool = Field(
        default=True,
        description="true: the deadline cancels in-flight work and attempts get the time left; "
        "false: the request times out at the edge and its work runs on (orphan work)",
    )
    admission: AdmissionSpec | None = Field(
        default=None, description="deadline-aware admission of attempts; none: off"
    )


class StreamCuts(Spec):
    """The cuts that watch a call's stream, per attempt: each retries or falls back as the
    policy's own cut does."""

    first_token_timeout_s: Threshold | None = Field(
        default=None,
        description="cut an attempt with no first token this long after its send: seconds, "
        "'pNN' or 'K x pNN' of the pilot's first-token time (queue wait included)",
    )
    idle_timeout_s: PositiveFloat | None = Field(
        default=None, description="cut an attempt once no token has come for this long"
    )
    resume: bool = Field(
        default=False,
        description="a retry after a mid-stream cut or break sends the text received so far "
        "as prefill and asks only for the rest",
    )


class WaitPolicy(StreamCuts, PolicyBase):
    """One attempt at a time, each allowed `timeout_s`, `retries` more after any failure."""

    kind: Literal["wait"]
    timeout_s: PositiveFloat | None = None
    retries: Annotated[int, Field(ge=0)] = 0
    providers: list[Name] | None = Field(
        default=None, description="attempt k runs on providers[k mod n]; default: the step's"
    )
    backoff: BackoffSpec | None = Field(
        default=None, description="wait between retries; none: only a 429's Retry-After"
    )


class CutPolicy(StreamCuts, PolicyBase):
    """As wait, but every attempt is cut at `cutoff` (seconds or a pilot percentile)."""

    kind: Literal["cut"]
    cutoff: Threshold
    retries: Annotated[int, Field(ge=0)] = 1
    providers: list[Name] | None = None
    backoff: BackoffSpec | None = Field(
        default=None, description="wait between retries; none: only a 429's Retry-After"
    )


class RacePolicy(StreamCuts, PolicyBase):
    """`attempts` calls at once over `providers` in turn; the first valid answer wins."""

    kind: Literal["race"]
    attempts: Annotated[int, Field(ge=1)] = 2
    providers: list[Name] | None = None
    retries: Annotated[int, Field(ge=0)] = Field(
        default=0, description="whole new races after every attempt of one failed"
    )
    timeout_s: PositiveFloat | None = None
    backoff: BackoffSpec | None = Field(
        default=None, description="wait between retries; none: only a 429's Retry-After"
    )


class HedgePolicy(PolicyBase):
    """One call on the step's provider; without a valid answer `after` its start, one more."""

    kind: Literal["hedge"]
    after: Threshold
    providers: list[Name] | None = Field(
        default=None, description="hedges go to these in turn; default: the step's provider"
    )
    hedges: Annotated[int, Field(ge=1)] = Field(
        default=1, description="extra calls at most; each fires `after` past the previous one"
    )


class DownshiftPolicy(StreamCuts, PolicyBase):
    """Cut the step's model at `cutoff`, then retry on the faster model `to`."""

    kind: Literal["downshift"]
    cutoff: Threshold
    to: Name
    retries: Annotated[int, Field(ge=1)] = Field(default=1, description="attempts on `to`")
    providers: list[Name] | None = None
    backoff: BackoffSpec | None = Field(
        default=None, description="wait between retries; none: only a 429's Retry-After"
    )


class AdaptivePolicy(PolicyBase):
    """Diagnose, then pick the direction: stuck -> hedge, too slow -> fall down, invalid ->
    fall up."""

    kind: Literal["adaptive"]
    cutoff: Threshold = Field(
        description="diagnosis time after an attempt's start: no first token = cut and re-draw; "
        "tokens flowing too slowly for the time left = fall down"
    )
    ttft_cutoff: Threshold | None = Field(
        default=None, description="no first token by then = stuck: hedge a fresh attempt"
    )
    hedge_after: Threshold | None = Field(
        default=None, description="no answer by then: hedge a fresh attempt in parallel"
    )
    fall_down: Name | None = Field(
        default=None, description="faster model for too-slow generation and truncated answers"
    )
    fall_up: Name | None = Field(default=None, description="stronger model after an invalid answer")
    attempts: Annotated[int, Field(ge=1)] = Field(default=3, description="calls per step at most")
    providers: list[Name] | None = None
    reserve_s: NonNegativeFloat | None = Field(
        default=None,
        description="seconds the steps after this one need; default: the sum of pilot medians "
        "along the longest path after it",
    )


class DraftPolicy(PolicyBase):
    """Race a cheap fast `model` against the step's: keep the draft if the primary has not
    answered `upgrade_within` after the start, else upgrade to the primary's answer."""

    kind: Literal["draft"]
    model: Name
    upgrade_within: Threshold = "p95"
    providers: list[Name] | None = Field(
        default=None, description="the draft runs on the first of these serving `model`"
    )


class RouterPolicy(PolicyBase):
    """LiteLLM's Router (litellm 1.110.2 or 1.80.0): a step's model is a model group; each call
    goes to a deployment the routing strategy picks among those not cooling down; the router is
    the only retry loop (`num_retries`), then `fallbacks` to other groups; a deployment past its
    allowed fails cools down for every request (`sim.policy.kinds.router`)."""

    kind: Literal["router"]
    litellm_version: Literal["1.110", "1.80"] = Field(
        default="1.110",
        description="whose Router: 1.110 (1.110.2, observed) or 1.80 (1.80.0, read from source)",
    )
    deployments: dict[Name, list[DeploymentSpec]] | None = Field(
        default=None,
        description="per model group (a model): its deployments in order; a group not given "
        "has one per provider serving the model",
    )
    routing_strategy: RoutingStrategy = "simple-shuffle"
    num_retries: Annotated[int, Field(ge=0)] = Field(
        default=2, description="retries in a group after its first failure (openai's default 2)"
    )
    retry_policy: RetryPolicySpec | None = Field(
        default=None, description="retries by the first failure's type, in place of num_retries"
    )
    fallbacks: dict[Name | Literal["*"], list[Name]] | None = Field(
        default=None,
        description="group -> groups tried in order after its retries failed ('*': any group)",
    )
    max_fallbacks: Annotated[int, Field(ge=0)] = Field(
        default=5, description="fallback depth at which no further fallback is started"
    )
    allowed_fails: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="failures of a deployment within cooldown_time_s before it cools down; "
        "none (or 3, litellm's default): LiteLLM's rate rule (a 429, or > 50% failed this minute)",
    )
    allowed_fails_policy: AllowedFailsPolicySpec | None = None
    cooldown_time_s: PositiveFloat = Field(
        default=DEFAULT_COOLDOWN_TIME_S, description="how long a deployment cools down, s"
    )
    disable_cooldowns: bool = False
    timeout_s: PositiveFloat | None = Field(
        default=None, description="per-call timeout (a timed-out call is retried); none: none"
    )
    retry_after_s: NonNegativeFloat = Field(
        default=0.0, description="the router's minimum backoff (Router(retry_after=...)), s"
    )
    lowest_latency_buffer: NonNegativeFloat = Field(
        default=0.0, description="latency-based-routing: pick among deployments within this share"
    )
    max_latency_list_size: Annotated[int, Field(ge=1)] = Field(
        default=10, description="latency-based-routing: latencies kept per deployment"
    )
    enable_mid_stream_fallback_continuation: bool = Field(
        default=False,
        description="1.110: a stream broken after its first token goes to the fallbacks "
        "(LiteLLM sends the partial as prefill, tailsim starts the answer over); off: the error "
        "is the request's. 1.80 always falls back",
    )


class PerStepPolicy(PolicyBase):
    """A map of step -> policy (a name or a policy with `kind`); `default` for the rest. Its
    own `controls` (if given) and deadline keys apply to every step."""

    kind: Literal["per_step"]
    steps: dict[Name, StepOverride]  # type: ignore[assignment]
    default: StepOverride = "wait"


PolicySpec = Annotated[
    WaitPolicy
    | CutPolicy
    | RacePolicy
    | HedgePolicy
    | DownshiftPolicy
    | AdaptivePolicy
    | DraftPolicy
    | RouterPolicy
    | PerStepPolicy,
    Field(discriminator="kind"),
]
#: A policy that runs one step directly (a `per_step` map resolves to these).
PlainPolicy = (
    WaitPolicy
    | CutPolicy
    | RacePolicy
    | HedgePolicy
    | DownshiftPolicy
    | AdaptivePolicy
    | DraftPolicy
    | RouterPolicy
)
POLICY_KINDS = (
    "wait", "cut", "race", "hedge", "downshift", "adaptive", "draft", "router", "per_step",
)  # fmt: skip
#: Fields holding a `Threshold`, by policy class; the first is the one `resolve_thresholds`
#: reports per step.
THRESHOLD_FIELDS: dict[type, tuple[str, ...]] = {
    CutPolicy: ("cutoff",),
    HedgePolicy: ("after",),
    DownshiftPolicy: ("cutoff",),
    AdaptivePolicy: ("cutoff", "ttft_cutoff", "hedge_after"),
    DraftPolicy: ("upgrade_within",),
}
#: Thresholds measured on the pilot's first-token times (queue wait included), not its totals.
FIRST_TOKEN_FIELDS = ("ttft_cutoff", "first_token_timeout_s")


def pilot_fields(spec: object) -> tuple[str, ...]:
    """The fields of a spec that the pilot may resolve: its `THRESHOLD_FIELDS` (the first one
    its main threshold), then the stream's first-token cut where the kind has one."""
    fields = THRESHOLD_FIELDS.get(type(spec), ())
    return (*fields, "first_token_timeout_s") if isinstance(spec, StreamCuts) else fields


#: Fields naming a model, by policy kind.
MODEL_FIELDS = {"downshift": ("to",), "adaptive": ("fall_down", "fall_up"), "draft": ("model",)}
