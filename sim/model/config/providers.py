"""Providers, models and latency laws: what a call meets once it is sent.

Owns the latency quantities (`DistSpec`, the lognormal `{median, p99}` pair), stalls, a client's
backoff and its SDK's own retries, load slowdown and bad spells, a provider's quotas and the
models it serves, and each model's prices, quality and behaviour on hard requests. Turned into
laws and queues by `sim.model.latency`, `sim.model.conditions` and the event engine's
`sim.engine.provider`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, PrivateAttr, model_validator

from sim.model.config.base import Name, NonNegativeFloat, PositiveFloat, Probability, Spec
from sim.model.config.sdk import resolve
from sim.model.errors import FieldError

_DIST_PARAMETERS: dict[str, tuple[set[str], ...]] = {
    "lognormal": ({"median", "p99"}, {"mu", "sigma"}),
    "exponential": ({"mean"},),
    "constant": ({"value"},),
    "empirical": ({"file"}, {"file", "column"}),
}


class DistSpec(Spec):
    """A positive random quantity: `{median, p99}` lognormal by default (`max`: truncated above),
    or an explicit `dist`."""

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
    max: PositiveFloat | None = Field(
        default=None,
        description="lognormal only: truncated above at this value (median and p99 stay the "
        "untruncated law's); none = no ceiling",
    )

    _samples: np.ndarray | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_parameters(self) -> DistSpec:
        if self.max is not None and self.dist != "lognormal":
            raise FieldError(("max",), f"only a lognormal takes a max, not dist '{self.dist}'")
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


class StallWhereSpec(Spec):
    """A share of each: a stall is before the first token with `before_first_token`, else
    mid-stream."""

    before_first_token: Probability


StallWhere = Literal["mid_stream", "before_first_token"] | StallWhereSpec


class StallSpec(Spec):
    """The transient tail: with `probability`, a call stalls for `extra_s`, mid-stream (its onset
    uniform over the output tokens) or before its first token (`where`)."""

    probability: Probability = 0.0
    extra_s: DistSpec
    where: StallWhere = Field(
        default="mid_stream",
        description="mid_stream (onset uniform over the output tokens), before_first_token "
        "(the stall delays the first token), or {before_first_token: S} (a share of each)",
    )

    @property
    def before_share(self) -> float:
        """The probability that a stall comes before the first token."""
        if isinstance(self.where, StallWhereSpec):
            return self.where.before_first_token
        return 1.0 if self.where == "before_first_token" else 0.0


class BackoffSpec(Spec):
    """A client's wait before retry k (k = 1, 2, ...): `base_s * multiplier**(k-1)`, capped at
    `max_s`, jittered; a 429's Retry-After is honoured instead when it is at most
    `retry_after_max_s` (as the OpenAI and Anthropic SDKs do)."""

    base_s: NonNegativeFloat = Field(default=0.5, description="wait before the first retry, s")
    max_s: NonNegativeFloat = Field(default=8.0, description="longest backoff wait, s")
    multiplier: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 2.0
    jitter: Literal["none", "full", "equal", "sdk", "additive"] = Field(
        default="full",
        description="none: the wait itself; full: uniform in [0, wait]; equal: wait/2 + "
        "uniform in [0, wait/2]; sdk: wait * (1 - 0.25 U) (the OpenAI and Anthropic SDKs); "
        "additive: wait + jitter_s * U (LiteLLM)",
    )
    jitter_s: NonNegativeFloat = Field(
        default=0.0, description="additive jitter: the most seconds added to the wait"
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


RetryOn = Literal["429", "408", "409", "5xx", "timeout", "connection"]


class SdkSpec(Spec):
    """The provider's client library retrying on its own, below the policy: each retry is a
    call. `preset` (a name alone is the shorthand) sets every other field as that SDK version
    does (`sim.model.config.sdk`); fields given override it, `backoff` key by key."""

    preset: Literal["none", "openai", "anthropic", "litellm"] = Field(
        default="none", description="none: tailsim's SDK layer as before presets"
    )
    retries: Annotated[int, Field(ge=0)] = Field(
        default=0, description="extra calls the SDK makes inside one policy attempt"
    )
    retry_on: tuple[RetryOn, ...] = Field(
        default=("429", "5xx"),
        description="failures it retries: 429, 408, 409, 5xx (hard errors), timeout (its own "
        "timeout_s), connection",
    )
    backoff: BackoffSpec = BackoffSpec()
    retry_after_ms: bool = Field(
        default=False, description="read a retry-after-ms header before Retry-After"
    )
    retry_after_max_s: NonNegativeFloat | None = Field(
        default=None,
        description="the longest Retry-After waited (none: backoff.retry_after_max_s)",
    )
    retry_after_above_max: Literal["backoff", "no_retry", "cap"] = Field(
        default="backoff",
        description="a longer Retry-After: wait the backoff, do not retry, or wait the maximum",
    )
    retry_after_integer_only: bool = Field(
        default=False, description="a Retry-After that is not whole seconds is ignored"
    )
    retry_after_jitter_s: NonNegativeFloat = Field(
        default=0.0, description="a Retry-After wait gets + U[0, this] seconds"
    )
    timeout_s: PositiveFloat | None = Field(
        default=None,
        description="per-attempt timeout, restarted on each SDK retry (client clock)",
    )
    stream_timeout_s: PositiveFloat | None = Field(
        default=None,
        description="on a streamed step, the read timeout in place of timeout_s (LiteLLM's "
        "stream_timeout); none: timeout_s",
    )
    honours_deadline: bool = Field(
        default=True,
        description="true: never sleeps past the policy's cut or the deadline; false: sleeps "
        "out its wait until cancelled",
    )

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: object) -> object:
        return resolve(data)

    @property
    def retry_after_cap(self) -> float:
        """The longest Retry-After this client waits as such."""
        if self.retry_after_max_s is not None:
            return self.retry_after_max_s
        return self.backoff.retry_after_max_s


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
    mid_stream_error_rate: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0,
        description="probability that an answer breaks after a uniform share of its output "
        "tokens (outcome broken)",
    )
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
    retry_after_ms: bool = Field(
        default=False,
        description="a 429 also carries retry-after-ms: the exact wait rounded up to the "
        "millisecond",
    )
    sdk: SdkSpec = SdkSpec()
    overhead_s: DistSpec | None = Field(
        default=None, description="per-call client, HTTP and event-loop overhead, seconds"
    )
    overhead_held: Probability = Field(
        default=0.0,
        description="share of overhead_s holding the slot before service (the rest comes after "
        "the slot is freed, before the caller sees the answer)",
    )
    slowdown: SlowdownSpec | None = None
    episodes: EpisodesSpec | None = None
    serves: Annotated[dict[Name, ServingSpec], Field(min_length=1)]


class PriceSpec(Spec):
    """US dollars per million tokens."""

    input: NonNegativeFloat = 0.0
    output: NonNegativeFloat = 0.0


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
