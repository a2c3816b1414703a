"""The scenario's typed, frozen configuration: field rules and cross-references, no I/O.

Loading YAML, reading referenced files and formatting errors live in `sim.model.scenario`; this
module
only says what a valid scenario is, so the engine can import it without touching files.
"""

from __future__ import annotations

import math
from difflib import get_close_matches
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from sim.model.errors import FieldError, Path
from sim.model.thresholds import parse_expected, parse_threshold


class Spec(BaseModel):
    """Base of every config object: unknown keys are errors, no type coercion (`true` is not
    a number), objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]

#: Seconds, "pNN" (the NNth percentile of a step's successful call latency in the pilot run),
#: or "KxpNN" (K times it; written "1.5 x p95", "1.5xp95" or "1.5*p95"). See sim.model.thresholds.
Threshold = Annotated[float | str, BeforeValidator(parse_threshold)]
#: `admission.expected`: one Threshold, or a mapping of step id (or `default`) -> Threshold.
ExpectedTimes = Annotated[float | str | dict[str, float | str], BeforeValidator(parse_expected)]


_DIST_PARAMETERS: dict[str, tuple[set[str], ...]] = {
    "lognormal": ({"median", "p99"}, {"mu", "sigma"}),
    "exponential": ({"mean"},),
    "constant": ({"value"},),
    "empirical": ({"file"}, {"file", "column"}),
}


class DistSpec(Spec):
    """A positive random quantity: `{median, p99}` lognormal by default, or an explicit `dist`."""

    dist: Literal["lognormal", "exponential", "constant", "empirical"] = "lognormal"
    median: PositiveFloat | None = None
    p99: PositiveFloat | None = None
    mu: Annotated[float, Field(allow_inf_nan=False)] | None = None
    sigma: PositiveFloat | None = None
    mean: PositiveFloat | None = None
    value: NonNegativeFloat | None = None
    file: str | None = Field(
        default=None, description="CSV file of samples, relative to the scenario"
    )
    column: str | None = Field(default=None, description="CSV column; default: the first")

    _samples: np.ndarray | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_parameters(self) -> DistSpec:
        options = _DIST_PARAMETERS[self.dist]
        known = {key for sets in _DIST_PARAMETERS.values() for keys in sets for key in keys}
        given = {k for k in known if getattr(self, k) is not None}
        if given not in options:
            allowed = " or ".join("{" + ", ".join(sorted(o)) + "}" for o in options)
            extra = sorted(given - {key for keys in options for key in keys})
            if extra:
                raise FieldError(
                    (extra[0],), f"not a parameter of dist '{self.dist}' (it takes {allowed})"
                )
            missing = sorted(min(options, key=lambda o: len(o - given)) - given)
            raise FieldError((missing[0],), f"missing: dist '{self.dist}' needs {allowed}")
        if self.median is not None and self.p99 is not None and not self.p99 > self.median:
            raise FieldError(
                ("p99",), f"must be greater than median ({self.median:g}), got {self.p99:g}"
            )
        return self

    @property
    def samples(self) -> np.ndarray | None:
        """Samples of an empirical distribution, attached by the loader."""
        return self._samples

    def attach_samples(self, samples: np.ndarray) -> None:
        """Attach the samples read from `file` (the loader's job, done once)."""
        self._samples = samples


class StallSpec(Spec):
    """The transient tail: with `probability`, a call stalls mid-generation for `extra_s`."""

    probability: Probability = 0.0
    extra_s: DistSpec


class BackoffSpec(Spec):
    """A client's wait before retry k (k = 1, 2, ...): `base_s * multiplier**(k-1)`, capped at
    `max_s`, jittered; a 429's Retry-After is honoured instead when it is at most
    `retry_after_max_s` (as the OpenAI and Anthropic SDKs do)."""

    base_s: NonNegativeFloat = Field(default=0.5, description="wait before the first retry, s")
    max_s: NonNegativeFloat = Field(default=8.0, description="longest backoff wait, s")
    multiplier: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 2.0
    jitter: Literal["none", "full", "equal"] = Field(
        default="full",
        description="none: the wait itself; full: uniform in [0, wait]; equal: wait/2 + "
        "uniform in [0, wait/2]",
    )
    honour_retry_after: bool = Field(
        default=True, description="after a 429, wait its Retry-After (if within the cap)"
    )
    retry_after_max_s: NonNegativeFloat = Field(
        default=60.0, description="a longer Retry-After is ignored (the backoff wait is used)"
    )

    @model_validator(mode="after")
    def _base_within_max(self) -> BackoffSpec:
        if self.base_s > self.max_s:
            raise FieldError(
                ("max_s",), f"must be at least base_s ({self.base_s:g}), got {self.max_s:g}"
            )
        return self


class SdkSpec(Spec):
    """Retries the provider's client library makes on its own, below the policy: each is a call
    (429s and hard errors are retried; junk answers look like success to an SDK)."""

    retries: Annotated[int, Field(ge=0)] = Field(
        default=0, description="extra calls the SDK makes after a 429 or hard error"
    )
    backoff: BackoffSpec = BackoffSpec()


class SlowdownSpec(Spec):
    """Load-dependent latency: first token and generation are stretched by
    `1 + a * utilisation**k`, utilisation = busy slots / concurrency when the call is served."""

    a: NonNegativeFloat = Field(default=1.0, description="extra time at full utilisation (x(1+a))")
    k: PositiveFloat = Field(default=2.0, description="how late the curve rises (higher = later)")


class EpisodesSpec(Spec):
    """Bad spells of one provider: they start on average every `every_s` seconds (start to
    start) and last Exp(`last_s`); a call served during one is `slowdown` times slower and fails
    with an extra hard error with probability `error_rate`."""

    every_s: PositiveFloat = Field(description="mean time from one spell's start to the next, s")
    last_s: PositiveFloat = Field(description="mean length of a spell, s")
    slowdown: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.0
    error_rate: Probability = 0.0

    @model_validator(mode="after")
    def _spells_fit(self) -> EpisodesSpec:
        if not self.last_s < self.every_s:
            raise FieldError(
                ("last_s",), f"must be below every_s ({self.every_s:g}), got {self.last_s:g}"
            )
        return self


class MedianP99Spec(Spec):
    """A lognormal given by its median and 99th percentile: the p99 must lie above the median."""

    median: float
    p99: float

    @model_validator(mode="after")
    def _p99_above_median(self) -> MedianP99Spec:
        if not self.p99 > self.median:
            raise FieldError(
                ("p99",), f"must be greater than median ({self.median:g}), got {self.p99:g}"
            )
        return self


class DifficultySpec(MedianP99Spec):
    """A per-request factor on first token and generation, the same for every attempt of the
    request (lognormal with this median and 99th percentile)."""

    median: PositiveFloat = 1.0
    p99: PositiveFloat = Field(description="99th percentile of the factor (> median)")


QuotaLimit = Annotated[int, Field(ge=1)] | None


class ServingSpec(Spec):
    """How one provider serves one model: latency, stalls, errors and junk answers."""

    ttft_s: DistSpec = Field(description="time to first token once a slot is held, seconds")
    tokens_per_s: DistSpec = Field(description="generation speed, output tokens per second")
    stall: StallSpec | None = None
    error_rate: Annotated[float, Field(ge=0, lt=1)] = 0.0
    invalid_rate: Annotated[float, Field(ge=0, lt=1)] = 0.0
    tpm: QuotaLimit = Field(default=None, description="this model's own tokens per minute")
    rpm: QuotaLimit = Field(default=None, description="this model's own requests per minute")
    input_tpm: QuotaLimit = Field(default=None, description="this model's input tokens/minute")
    output_tpm: QuotaLimit = Field(default=None, description="this model's output tokens/minute")
    ttft_s_per_ktok: NonNegativeFloat = Field(
        default=0.0, description="prefill: extra first-token seconds per 1000 input tokens"
    )

    @model_validator(mode="after")
    def _rates_sum_below_one(self) -> ServingSpec:
        if self.error_rate + self.invalid_rate >= 1:
            raise FieldError(
                ("invalid_rate",),
                "error_rate + invalid_rate must be < 1, "
                f"got {self.error_rate + self.invalid_rate:g}",
            )
        return self


class ProviderSpec(Spec):
    """One provider: a queue with `concurrency` slots, shared quotas, the models it serves."""

    concurrency: Annotated[int, Field(ge=1)] = 1_000_000
    tpm: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="tokens per minute (input + output), shared; none = unlimited"
    )
    rpm: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="requests per minute, shared; none = unlimited"
    )
    input_tpm: QuotaLimit = Field(default=None, description="input tokens per minute, shared")
    output_tpm: QuotaLimit = Field(default=None, description="output tokens per minute, shared")
    charge: Literal["output", "max_tokens"] = Field(
        default="output",
        description="what admission takes for the answer: its output tokens, or the step's "
        "max_tokens reserved (never refunded)",
    )
    window: Literal["bucket", "minute"] = Field(
        default="bucket",
        description="bucket: refills continuously at limit/60 per second; minute: what was "
        "admitted in the last 60 s must stay within the limit",
    )
    start: Literal["full", "steady"] = Field(
        default="full",
        description="full: a whole minute's quota at t=0; steady: as if the last minute used "
        "it all (bucket empty, window full)",
    )
    retry_after: Literal["exact", "seconds", "window"] = Field(
        default="seconds",
        description="a 429's Retry-After: exact time until admitted; seconds: that rounded up "
        "to whole seconds, at least 1 (HTTP Retry-After); window: time until the quota is whole "
        "again",
    )
    sdk: SdkSpec = SdkSpec()
    slowdown: SlowdownSpec | None = None
    episodes: EpisodesSpec | None = None
    serves: Annotated[dict[Name, ServingSpec], Field(min_length=1)]


class PriceSpec(Spec):
    """US dollars per million tokens."""

    input: NonNegativeFloat = 0.0
    output: NonNegativeFloat = 0.0


# --------------------------------------------------------------- hard requests (sim.model.hardness)


class HardnessSpec(Spec):
    """Which requests are hard: each with probability `share`, drawn once per request on a
    stream of its own, so every attempt, re-send and policy of a hard request meets it."""

    share: Probability = Field(description="share of requests that are hard, in [0, 1]")


class WhenHardSpec(Spec):
    """What a hard request does to one model's calls, on every attempt of that request."""

    invalid_rate: Annotated[float, Field(ge=0, lt=1)] | None = Field(
        default=None,
        description="junk probability of the model's calls on a hard request, in place of each "
        "serving's invalid_rate; none: unchanged",
    )
    length: PositiveFloat = Field(
        default=1.0,
        description="factor on the answer length of the model's calls on a hard request",
    )


class ModelSpec(Spec):
    """A model: its list prices, a quality score in [0, 1], how it does on hard requests."""

    price_per_mtok: PriceSpec = PriceSpec()
    quality: Probability = 1.0
    when_hard: WhenHardSpec | None = None


class LengthSpec(MedianP99Spec):
    """An answer length that varies per call: a lognormal from its median and p99 (tokens)."""

    median: Annotated[float, Field(ge=1, allow_inf_nan=False)]
    p99: Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ValidatorSpec(Spec):
    """A post-call check of a step's answers: catches a share of invalid ones, for a price."""

    catches: Probability = Field(description="share of invalid answers it rejects")
    latency_s: NonNegativeFloat = Field(default=0.0, description="seconds per check")
    cost: NonNegativeFloat = Field(default=0.0, description="USD per check")


class ToolSpec(Spec):
    """A side-effect step's external action: the remote commits it `commit_s` after the submit
    (unless it refuses with a transient error, with `error_rate`), and its confirmation reaches
    the workflow `confirm_s` after the commit. `idempotent`: submits carry an idempotency key
    (request and step), so the remote recognises a second submit and commits once."""

    commit_s: DistSpec = Field(description="submit to the remote's commit, seconds")
    confirm_s: DistSpec = Field(
        default=DistSpec(dist="constant", value=0.0),
        description="commit to the confirmation reaching the workflow, seconds",
    )
    error_rate: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0, description="the remote refuses (transient, nothing committed)"
    )
    idempotent: bool = Field(default=False, description="submits carry an idempotency key")
    retries: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="re-submits after a refusal, or after an unknown outcome if idempotent",
    )


class StepSpec(Spec):
    """One step of the workflow: an LLM call (`kind: llm`) or an external action (`kind: tool`)."""

    id: Name
    kind: Literal["llm", "tool"] = "llm"
    model: Name | None = Field(default=None, description="required for kind llm")
    input_tokens: Annotated[int, Field(ge=0)] = 1000
    output_tokens: Annotated[int, Field(ge=1)] | LengthSpec = Field(
        default=200, description="answer tokens: a number, or {median, p99} drawn per call"
    )
    max_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="the answer's token cap sent with the call: a longer answer is cut there "
        "(truncated, invalid); providers with charge: max_tokens reserve it at admission "
        "(default: none; they reserve output_tokens, or a drawn length's p99)",
    )
    validator: ValidatorSpec | None = Field(
        default=None,
        description="post-call check; without one, junk is caught perfectly and for free",
    )
    after: list[Name] = Field(default_factory=list)
    required: bool = True
    provider: Name | None = Field(
        default=None, description="default: the first provider (in file order) serving the model"
    )
    budget_s: PositiveFloat | None = Field(
        default=None, description="step budget: queue waits and every attempt and retry, s"
    )
    queue_budget_s: PositiveFloat | None = Field(
        default=None, description="longest wait of one call for a provider slot, s"
    )
    attempt_budget_s: PositiveFloat | None = Field(
        default=None,
        description="longest service of one attempt once it holds a slot (besides the "
        "policy's cut, which counts the queue wait too), s",
    )
    tool: ToolSpec | None = Field(default=None, description="kind tool: the external action")

    @model_validator(mode="after")
    def _kind_fields(self) -> StepSpec:
        if self.kind == "llm" and self.model is None:
            raise FieldError(("model",), "missing (required): a step of kind 'llm' needs a model")
        if self.kind == "llm" and self.tool is not None:
            raise FieldError(("tool",), "only a step of kind 'tool' takes a tool")
        if self.kind == "tool":
            if self.tool is None:
                raise FieldError(("tool",), "missing: a step of kind 'tool' needs a tool")
            for key in ("model", "provider"):
                if getattr(self, key) is not None:
                    raise FieldError((key,), "a step of kind 'tool' calls no model")
        return self

    @property
    def reserved_output(self) -> int:
        """The answer's token cap: `max_tokens`, else `output_tokens` (a drawn length's p99)."""
        if self.max_tokens is not None:
            return self.max_tokens
        length = self.output_tokens
        return length if isinstance(length, int) else math.ceil(length.p99)


class WorkflowSpec(Spec):
    """The steps; a step starts once every step in its `after` has succeeded."""

    steps: Annotated[list[StepSpec], Field(min_length=1)]
    reserve_s: NonNegativeFloat = Field(
        default=0.0,
        description="time kept after the last step for validation and delivery: an answer is "
        "delivered this long after it, and attempts get the time left minus it, s",
    )


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


class WaitPolicy(PolicyBase):
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


class CutPolicy(PolicyBase):
    """As wait, but every attempt is cut at `cutoff` (seconds or a pilot percentile)."""

    kind: Literal["cut"]
    cutoff: Threshold
    retries: Annotated[int, Field(ge=0)] = 1
    providers: list[Name] | None = None
    backoff: BackoffSpec | None = Field(
        default=None, description="wait between retries; none: only a 429's Retry-After"
    )


class RacePolicy(PolicyBase):
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


class DownshiftPolicy(PolicyBase):
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
)
POLICY_KINDS = ("wait", "cut", "race", "hedge", "downshift", "adaptive", "draft", "per_step")
#: Fields holding a `Threshold`, by policy class; the first is the one `resolve_thresholds`
#: reports per step.
THRESHOLD_FIELDS: dict[type, tuple[str, ...]] = {
    CutPolicy: ("cutoff",),
    HedgePolicy: ("after",),
    DownshiftPolicy: ("cutoff",),
    AdaptivePolicy: ("cutoff", "ttft_cutoff", "hedge_after"),
    DraftPolicy: ("upgrade_within",),
}
#: Fields naming a model, by policy kind.
MODEL_FIELDS = {"downshift": ("to",), "adaptive": ("fall_down", "fall_up"), "draft": ("model",)}


class SegmentSpec(Spec):
    """One stretch of a `schedule`: Poisson arrivals at `rate_per_s` for `duration_s`."""

    duration_s: PositiveFloat
    rate_per_s: PositiveFloat


class ArrivalsSpec(Spec):
    """When requests arrive: Poisson, on/off bursts with the same mean rate, a trace replay, or
    a schedule of Poisson segments (a burst at a known time)."""

    kind: Literal["poisson", "bursty", "trace", "schedule"] = "poisson"
    rate_per_s: PositiveFloat = 1.0
    peak_to_mean: Annotated[float, Field(gt=1)] = Field(
        default=5.0, description="bursty: arrival rate inside a burst over the mean rate"
    )
    burst_s: PositiveFloat = Field(default=10.0, description="bursty: mean burst length, s")
    file: str | None = Field(default=None, description="trace: CSV of arrival timestamps")
    column: str = Field(default="TIMESTAMP", description="trace: the timestamp column")
    time_scale: PositiveFloat = Field(
        default=1.0, description="trace: multiply gaps by this (0.5 = twice the load)"
    )
    segments: list[SegmentSpec] | None = Field(
        default=None,
        description="schedule: Poisson segments in order; after the last, `rate_per_s` again",
    )

    _times: np.ndarray | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _trace_needs_file(self) -> ArrivalsSpec:
        if self.kind == "trace" and self.file is None:
            raise FieldError(("file",), "missing: kind 'trace' needs a file of timestamps")
        if self.kind == "schedule" and not self.segments:
            raise FieldError(
                ("segments",), "missing: kind 'schedule' needs segments [{duration_s, rate_per_s}]"
            )
        return self

    @property
    def trace_offsets(self) -> np.ndarray | None:
        """Arrival offsets in seconds from the trace's first row, attached by the loader."""
        return self._times

    def attach_trace(self, offsets: np.ndarray) -> None:
        """Attach the offsets read from `file` (the loader's job, done once)."""
        self._times = offsets


class CustomerRetrySpec(Spec):
    """Customers re-send a failed request whole, `delay_s` later, with `probability`."""

    probability: Probability = 0.0
    max: Annotated[int, Field(ge=0)] = 0
    delay_s: NonNegativeFloat = 5.0
    backoff: BackoffSpec | None = Field(
        default=None, description="re-send k waits this backoff's k-th wait instead of delay_s"
    )


class DisconnectSpec(Spec):
    """Callers who hang up: with `probability` a run's caller disconnects `after_s` after its
    arrival (if it is still going); it fails then and is not re-sent."""

    probability: Probability = 0.0
    after_s: DistSpec = Field(description="time from arrival to the disconnect, s")


class CustomersSpec(Spec):
    """How customers behave after a failure."""

    retry: CustomerRetrySpec = CustomerRetrySpec()
    disconnect: DisconnectSpec | None = None


class PilotSpec(Spec):
    """The pilot run that measures each step's latency to resolve 'pNN' thresholds."""

    requests: Annotated[int, Field(ge=20)] = 1000


class BillingSpec(Spec):
    """What a cancelled call costs once its slot is held (calls dropped while queued cost 0)."""

    cancelled: Literal["full", "elapsed", "none"] = Field(
        default="full",
        description="full: the provider generates and bills the whole answer; elapsed: only "
        "the tokens generated before the cancel; none: nothing",
    )


class SweepSpec(Spec):
    """A grid of key-path overrides run by `tailsim sweep`, and `zip`: paired lists whose i-th
    values are set together (one axis of the grid, not a product)."""

    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    zip: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    replications: Annotated[int, Field(ge=1)] = 1

    @model_validator(mode="after")
    def _zip_lists_pair_up(self) -> SweepSpec:
        lengths = {key: len(values) for key, values in self.zip.items()}
        if len(set(lengths.values())) > 1:
            first = next(iter(lengths))
            problems = [
                (
                    ("zip", key),
                    f"has {n} values, but {first} has {lengths[first]}: paired lists "
                    "must be equally long",
                )
                for key, n in lengths.items()
                if n != lengths[first]
            ]
            raise FieldError(*problems[0], *problems[1:])
        both = [key for key in self.zip if key in self.grid]
        if both:
            raise FieldError(("zip", both[0]), "is also in sweep.grid: a key is swept one way")
        return self


class Scenario(Spec):
    """A whole scenario, validated once at the edge and trusted inside."""

    name: Name
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    deadline_s: PositiveFloat = 120.0
    first_signal_s: PositiveFloat | None = Field(
        default=None, description="target time to the first token of the first step, s"
    )
    requests: Annotated[int, Field(ge=1)] = 1000
    warmup_s: NonNegativeFloat = Field(
        default=0.0, description="requests arriving before this run but are left out of the summary"
    )
    difficulty: DifficultySpec | None = None
    hardness: HardnessSpec | None = None
    arrivals: ArrivalsSpec = ArrivalsSpec()
    customers: CustomersSpec = CustomersSpec()
    models: Annotated[dict[Name, ModelSpec], Field(min_length=1)]
    providers: Annotated[dict[Name, ProviderSpec], Field(min_length=1)]
    workflow: WorkflowSpec
    policies: Annotated[dict[Name, PolicySpec], Field(min_length=1)]
    pilot: PilotSpec = PilotSpec()
    billing: BillingSpec = BillingSpec()
    sweep: SweepSpec | None = None
    quality_floor: Probability = Field(
        default=0.0,
        description="a delivered run whose quality is below this is not a valid hit",
    )
    engine: Literal["auto", "des", "vectorized"] = Field(
        default="auto",
        description="auto: the vectorized engine where it gives the same numbers (nothing shared "
        "between requests), else the event engine; des: always the event engine; vectorized: "
        "always the vectorized engine (an error where it does not apply)",
    )
    timeseries_bin_s: PositiveFloat = Field(
        default=10.0, description="width of a timeseries.parquet bin, s"
    )

    _source_dir: str | None = PrivateAttr(default=None)
    _source_file: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _step_maps_are_per_step_policies(cls, data: Any) -> Any:
        """`policies: {name: {step: policy, ...}}` without `kind` is a per_step map."""
        if not isinstance(data, dict) or not isinstance(data.get("policies"), dict):
            return data
        steps = _sequence(_mapping(data.get("workflow")).get("steps"))
        ids = {s.get("id") for s in steps if isinstance(s, dict)}
        policies = dict(data["policies"])
        for name, raw in policies.items():
            if isinstance(raw, dict) and raw and "kind" not in raw:
                keys = set(raw) - {"default"}
                if keys and keys <= ids:
                    default = {"default": raw["default"]} if "default" in raw else {}
                    steps_map = {k: v for k, v in raw.items() if k != "default"}
                    policies[name] = {"kind": "per_step", "steps": steps_map, **default}
        return {**data, "policies": policies}

    @model_validator(mode="after")
    def _check_references(self) -> Scenario:
        problems = reference_problems(self.model_dump())
        if not problems:
            from sim.policy.perstep import step_problems  # noqa: PLC0415 - it imports this module

            problems = step_problems(self)
        if problems:
            raise FieldError(*problems[0], *problems[1:])
        return self

    @model_validator(mode="after")
    def _hard_requests(self) -> Scenario:
        from sim.model.hardness import hardness_problems  # noqa: PLC0415 - it imports this module

        problems = hardness_problems(self)
        if problems:
            raise FieldError(*problems[0], *problems[1:])
        return self

    @model_validator(mode="after")
    def _reserve_within_deadline(self) -> Scenario:
        if not self.workflow.reserve_s < self.deadline_s:
            raise FieldError(
                ("workflow", "reserve_s"),
                f"must be below deadline_s ({self.deadline_s:g}), got {self.workflow.reserve_s:g}",
            )
        return self

    @property
    def source_dir(self) -> str | None:
        """The folder relative file names in this scenario are read from (set by the loader)."""
        return self._source_dir

    def set_source_dir(self, folder: str, file: str | None = None) -> None:
        """Remember where relative file names resolve, and the file the scenario came from when
        there is one (the loader's job, done once)."""
        self._source_dir = folder
        self._source_file = file if file is not None else self._source_file

    @property
    def source_file(self) -> str | None:
        """The file the scenario was loaded from (None when built from a mapping)."""
        return self._source_file

    @property
    def source(self) -> str:
        """What error messages call this scenario: the file it was loaded from, else its name."""
        return self._source_file or self.name

    def serving_providers(self, model: str) -> list[str]:
        """Providers serving `model`, in file order."""
        return [p for p, spec in self.providers.items() if model in spec.serves]

    def step_provider(self, step: StepSpec) -> str:
        """The provider a step runs on by default ("" for a tool step: it calls no model)."""
        if step.model is None:
            return ""
        return step.provider or self.serving_providers(step.model)[0]


def reference_problems(data: Any) -> list[tuple[Path, str]]:
    """Every cross-reference problem of scenario data, each with its key path.

    Works on plain (possibly invalid) data, so a typo elsewhere in the file does not hide a
    reference problem: parts of the wrong shape are skipped here (field validation names them).
    """
    data = _mapping(data)
    models = set(_mapping(data.get("models")))
    providers = {k: _mapping(v) for k, v in _mapping(data.get("providers")).items()}
    serves = {p: set(_mapping(spec.get("serves"))) for p, spec in providers.items()}
    problems: list[tuple[Path, str]] = []
    for pname, served in serves.items():
        for mname in served:
            if models and mname not in models:
                where = ("providers", pname, "serves", mname)
                problems.append((where, f"unknown model '{mname}'{_choices(mname, models)}"))
    steps = [_mapping(s) for s in _sequence(_mapping(data.get("workflow")).get("steps"))]
    problems += _step_problems(steps, models, serves)
    problems += _policy_problems(_mapping(data.get("policies")), models, serves, steps)
    problems += _quota_problems(providers, steps)
    return problems


def _step_problems(
    steps: list[dict[str, Any]], models: set[str], serves: dict[str, set[str]]
) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    ids = [s.get("id") for s in steps]
    seen: dict[Any, int] = {}
    for i, step in enumerate(steps):
        base: Path = ("workflow", "steps", i)
        sid, model, provider = step.get("id"), step.get("model"), step.get("provider")
        if isinstance(sid, str) and sid in seen:
            problems.append(((*base, "id"), f"duplicate step id '{sid}' (also steps[{seen[sid]}])"))
        seen.setdefault(sid, i)
        if not isinstance(model, str) or not models:
            pass
        elif model not in models:
            problems.append(((*base, "model"), f"unknown model '{model}'{_choices(model, models)}"))
        elif isinstance(provider, str):
            if provider not in serves:
                problems.append(
                    (
                        (*base, "provider"),
                        f"unknown provider '{provider}'{_choices(provider, serves)}",
                    )
                )
            elif model not in serves[provider]:
                problems.append(
                    ((*base, "provider"), f"provider '{provider}' does not serve model '{model}'")
                )
        elif serves and not any(model in served for served in serves.values()):
            problems.append(((*base, "model"), f"no provider serves model '{model}'"))
        for j, dep in enumerate(_sequence(step.get("after"))):
            if not isinstance(dep, str):
                continue
            if dep not in ids:
                where = ("workflow", "steps", i, "after", j)
                known = [x for x in ids if isinstance(x, str)]
                problems.append((where, f"unknown step '{dep}'{_choices(dep, known)}"))
            elif dep == sid:
                problems.append(
                    (("workflow", "steps", i, "after", j), "a step cannot come after itself")
                )
    if len(seen) == len(steps):  # with duplicate ids a "cycle" would be an artefact
        graph = {
            str(s.get("id")): [
                d for d in _sequence(s.get("after")) if d in ids and d != s.get("id")
            ]
            for s in steps
        }
        cycle = _find_cycle(graph)
        if cycle:
            problems.append((("workflow", "steps"), "dependency cycle: " + " -> ".join(cycle)))
    return problems


def _policy_problems(
    policies: dict[str, Any],
    models: set[str],
    serves: dict[str, set[str]],
    steps: list[dict[str, Any]],
) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    for name, raw in policies.items():
        policy = _mapping(raw)
        for j, pname in enumerate(_sequence(policy.get("providers"))):
            if isinstance(pname, str) and serves and pname not in serves:
                problems.append(
                    (
                        ("policies", name, "providers", j),
                        f"unknown provider '{pname}'{_choices(pname, serves)}",
                    )
                )
        for field in MODEL_FIELDS.get(str(policy.get("kind")), ()):
            target = policy.get(field)
            if not isinstance(target, str) or not models:
                continue
            if target not in models:
                problems.append(
                    (
                        ("policies", name, field),
                        f"unknown model '{target}'{_choices(target, models)}",
                    )
                )
            elif serves and not any(target in served for served in serves.values()):
                problems.append((("policies", name, field), f"no provider serves model '{target}'"))
    return problems


def _quota_problems(
    providers: dict[str, dict[str, Any]], steps: list[dict[str, Any]]
) -> list[tuple[Path, str]]:
    """Token quotas (provider-wide or per model) too small to ever admit one call."""

    def number(value: Any, default: int) -> int | None:
        if value is None:
            return default
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    problems: list[tuple[Path, str]] = []
    for pname, spec in providers.items():
        reserve = spec.get("charge") == "max_tokens"
        needs: dict[str, list[tuple[str, int, int]]] = {}
        for s in steps:
            inp, out = number(s.get("input_tokens"), 1000), number(s.get("output_tokens"), 200)
            if inp is None or out is None:
                continue
            if reserve:
                out = number(s.get("max_tokens"), out) or out
            needs.setdefault(str(s.get("model")), []).append((str(s.get("model")), inp, out))
        served = _mapping(spec.get("serves"))
        scopes: list[tuple[Path, dict[str, Any], list[tuple[str, int, int]]]] = [
            (("providers", pname), spec, [n for m in served for n in needs.get(m, [])])
        ]
        scopes += [
            (("providers", pname, "serves", m), _mapping(served[m]), needs.get(m, []))
            for m in served
        ]
        for where, limits, calls in scopes:
            for key, size in (
                ("tpm", lambda c: c[1] + c[2]),
                ("input_tpm", lambda c: c[1]),
                ("output_tpm", lambda c: c[2]),
            ):
                limit = limits.get(key)
                biggest = max((size(c) for c in calls), default=0)
                if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < biggest:
                    problems.append(
                        (
                            (*where, key),
                            f"must be at least one call's tokens ({biggest}), "
                            "or no call is ever admitted",
                        )
                    )
    return problems


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sequence(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One dependency cycle in `graph` (node -> prerequisites), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return None


def _choices(value: str, allowed: Any) -> str:
    """' (did you mean ...? known: ...)' for an unknown name."""
    names = sorted(allowed)
    close = get_close_matches(value, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f" ({hint}known: {', '.join(names)})"
