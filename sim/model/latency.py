"""Latency distributions that carry their exact properties beside their sampling.

Every distribution samples by inverse transform from uniforms, so the engine can draw one block
of uniforms per (request, step, attempt) and reuse it across policies (common random numbers),
and tests can compare what the engine saw against `cdf` / `sf` / `quantile`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr, ndtri

from sim.model.config import DistSpec, ServingSpec

#: z-score of the 99th percentile of a standard normal, used by (median, p99) parametrisations.
Z99 = float(ndtri(0.99))


def lognormal_params(median: float, p99: float) -> tuple[float, float]:
    """Return (mu, sigma) of the lognormal whose median and 99th percentile are given."""
    if not (median > 0 and p99 > median):
        raise ValueError(f"need 0 < median < p99, got median={median}, p99={p99}")
    return math.log(median), (math.log(p99) - math.log(median)) / Z99


class Distribution:
    """A positive random quantity with exact quantile, cdf and survival function."""

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        """Values at the quantiles `u` (inverse transform sampling)."""
        raise NotImplementedError

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        """P(X <= t)."""
        raise NotImplementedError

    @property
    def mean(self) -> float:
        """E[X]."""
        raise NotImplementedError

    def quantile(self, q: float) -> float:
        """The q-quantile."""
        return float(self.from_uniform(np.asarray([q]))[0])

    @property
    def median(self) -> float:
        """The 0.5-quantile."""
        return self.quantile(0.5)

    def sf(self, t: np.ndarray | float) -> np.ndarray:
        """P(X > t)."""
        return 1.0 - self.cdf(t)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """`size` independent draws from the given generator."""
        return self.from_uniform(rng.random(size))


@dataclass(frozen=True)
class LogNormal(Distribution):
    """exp(mu + sigma Z): the heavy-ish tail of LLM call times; with a finite `upper`, that law
    truncated above at `upper` (a log whose calls stop at a ceiling)."""

    mu: float
    sigma: float
    upper: float = math.inf

    @classmethod
    def from_median_p99(cls, median: float, p99: float, upper: float = math.inf) -> LogNormal:
        """The lognormal with this median and 99th percentile (truncated at `upper`)."""
        return cls(*lognormal_params(median, p99), upper)

    @property
    def top(self) -> float:
        """F(upper) of the untruncated law: the share of it kept (1 without a ceiling)."""
        if math.isinf(self.upper):
            return 1.0
        return float(ndtr((math.log(self.upper) - self.mu) / self.sigma))

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        if math.isinf(self.upper):
            return np.exp(self.mu + self.sigma * ndtri(u))
        # Inverse CDF of the truncated law on the same uniform: u' = u * F(upper).
        return np.minimum(
            np.exp(self.mu + self.sigma * ndtri(np.asarray(u) * self.top)), self.upper
        )

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(t, 0.0)) - self.mu) / self.sigma
        if math.isinf(self.upper):
            return ndtr(z)
        return np.minimum(ndtr(z) / self.top, 1.0)

    @property
    def mean(self) -> float:
        plain = math.exp(self.mu + self.sigma**2 / 2)
        if math.isinf(self.upper):
            return plain
        z = (math.log(self.upper) - self.mu) / self.sigma
        return plain * float(ndtr(z - self.sigma)) / self.top

    @property
    def median(self) -> float:
        return math.exp(self.mu) if math.isinf(self.upper) else self.quantile(0.5)


@dataclass(frozen=True)
class Exponential(Distribution):
    """Memoryless service times, for queueing theory checks."""

    mean_value: float

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        return -self.mean_value * np.log1p(-np.asarray(u))

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        return np.where(t > 0, -np.expm1(-np.maximum(t, 0.0) / self.mean_value), 0.0)

    @property
    def mean(self) -> float:
        return self.mean_value


@dataclass(frozen=True)
class Constant(Distribution):
    """Always the same value."""

    value: float

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        return np.full(np.shape(u), self.value, dtype=float)

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        return np.where(np.asarray(t, dtype=float) >= self.value, 1.0, 0.0)

    @property
    def mean(self) -> float:
        return self.value


@dataclass(frozen=True)
class Empirical(Distribution):
    """Resampling of measured values: each draw is one of the samples, equally likely."""

    samples: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", np.sort(np.asarray(self.samples, dtype=float)))

    def from_uniform(self, u: np.ndarray) -> np.ndarray:
        n = len(self.samples)
        index = np.minimum((np.asarray(u) * n).astype(np.int64), n - 1)
        return self.samples[index]

    def cdf(self, t: np.ndarray | float) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        return np.searchsorted(self.samples, t, side="right") / len(self.samples)

    @property
    def mean(self) -> float:
        return float(self.samples.mean())


def build_distribution(spec: DistSpec) -> Distribution:
    """The distribution a validated `DistSpec` describes."""
    if spec.dist == "lognormal":
        if spec.median is not None and spec.p99 is not None:
            return LogNormal.from_median_p99(spec.median, spec.p99, spec.max or math.inf)
        return LogNormal(float(spec.mu), float(spec.sigma), spec.max or math.inf)  # type: ignore[arg-type]
    if spec.dist == "exponential":
        return Exponential(float(spec.mean))  # type: ignore[arg-type]
    if spec.dist == "constant":
        return Constant(float(spec.value))  # type: ignore[arg-type]
    if spec.samples is None:
        raise ValueError("empirical distribution without samples: load it with sim.load_scenario")
    return Empirical(spec.samples)


#: Columns of the uniform block one call draws from (see `CallLatency.draw`).
U_TTFT, U_SPEED, U_STALL, U_STALL_EXTRA, U_OUTCOME = range(5)
UNIFORMS_PER_CALL = 5

OK, ERROR, INVALID = 0, 1, 2
#: A drawn outcome set by the engine (never by `CallLatency.draw`): an answer whose stream
#: breaks after a share of its tokens (`mid_stream_error_rate`).
BROKEN = 3


@dataclass(frozen=True)
class CallDraws:
    """Per-request draws of one (step, attempt, serving path), as plain lists for fast indexing."""

    ttft: list[float]
    generation: list[float]
    stall: list[float]
    outcome: list[int]


@dataclass(frozen=True)
class CallLatency:
    """The latency law of one serving path: first token, generation speed, stalls, failures."""

    ttft: Distribution
    tokens_per_s: Distribution
    stall_probability: float
    stall_extra: Distribution | None
    error_rate: float
    invalid_rate: float
    ttft_s_per_ktok: float = 0.0  # prefill: first-token seconds added per 1000 input tokens
    stall_before: float = 0.0  # the share of stalls before the first token (else mid-stream)
    break_rate: float = 0.0  # an answer's stream breaks mid-way (`mid_stream_error_rate`)

    @classmethod
    def from_spec(cls, spec: ServingSpec) -> CallLatency:
        """Build from a validated serving spec."""
        stall = spec.stall
        return cls(
            ttft=build_distribution(spec.ttft_s),
            tokens_per_s=build_distribution(spec.tokens_per_s),
            stall_probability=stall.probability if stall else 0.0,
            stall_extra=build_distribution(stall.extra_s) if stall else None,
            error_rate=spec.error_rate,
            invalid_rate=spec.invalid_rate,
            ttft_s_per_ktok=spec.ttft_s_per_ktok,
            stall_before=stall.before_share if stall else 0.0,
            break_rate=spec.mid_stream_error_rate,
        )

    @property
    def streams(self) -> bool:
        """Its stalls may come before the first token or its answers break mid-stream: a call's
        draws need the stream's own draws (`sim.model.stream`) beyond the uniform block."""
        return self.break_rate > 0 or (self.stall_probability > 0 and self.stall_before > 0)

    def draw(self, u: np.ndarray, output_tokens: int) -> CallDraws:
        """Turn an (n, 5) block of uniforms into n calls' first-token, generation and stall times.

        A stall's place (mid-stream by default, onset uniform over the output tokens) and a
        mid-stream break are drawn by the engine from streams of their own (`sim.model.stream`).
        """
        ttft = self.ttft.from_uniform(u[:, U_TTFT])
        speed = self.tokens_per_s.from_uniform(u[:, U_SPEED])
        generation = output_tokens / np.maximum(speed, 1e-9)
        if self.stall_extra is not None and self.stall_probability > 0:
            stalled = u[:, U_STALL] < self.stall_probability
            stall = np.where(stalled, self.stall_extra.from_uniform(u[:, U_STALL_EXTRA]), 0.0)
        else:
            stall = np.zeros(len(u))
        v = u[:, U_OUTCOME]
        outcome = np.where(
            v < self.error_rate,
            ERROR,
            np.where(v < self.error_rate + self.invalid_rate, INVALID, OK),
        )
        return CallDraws(ttft.tolist(), generation.tolist(), stall.tolist(), outcome.tolist())
