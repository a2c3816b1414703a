"""The scenario's typed, frozen configuration: field rules and cross-references, no I/O.

Loading YAML, reading referenced files and formatting errors live in `sim.scenario`; this module
only says what a valid scenario is, so the engine can import it without touching files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
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

Path = tuple[str | int, ...]


class FieldError(ValueError):
    """Validation problems, each at a key path below the model that raised them."""

    def __init__(self, path: Path, message: str, *more: tuple[Path, str]) -> None:
        super().__init__(message)
        self.problems: list[tuple[Path, str]] = [(path, message), *more]


class Spec(BaseModel):
    """Base of every config object: unknown keys are errors, objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]

_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?)$")


def _parse_threshold(value: Any) -> float | str:
    """Accept seconds (> 0) or 'pNN' (a percentile measured by the pilot run)."""
    if isinstance(value, bool):
        raise ValueError(f"expected seconds (> 0) or a percentile like 'p95', got {value!r}")
    if isinstance(value, int | float):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"seconds must be a finite number > 0, got {value!r}")
        return float(value)
    if isinstance(value, str):
        match = _PERCENTILE.match(value.strip())
        if match and 0 < float(match.group(1)) < 100:
            return f"p{match.group(1)}"
        raise ValueError(
            f"expected seconds (> 0) or a percentile 'pNN' with 0 < NN < 100, got {value!r}"
        )
    raise ValueError(f"expected seconds (> 0) or a percentile like 'p95', got {value!r}")


#: Seconds, or "pNN": the NNth percentile of a step's successful call latency in the pilot run.
Threshold = Annotated[float | str, BeforeValidator(_parse_threshold)]


def percentile_of(threshold: float | str) -> float | None:
    """The NN of a 'pNN' threshold, or None when the threshold is already in seconds."""
    return float(threshold[1:]) if isinstance(threshold, str) else None


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


class ServingSpec(Spec):
    """How one provider serves one model: latency, stalls, errors and junk answers."""

    ttft_s: DistSpec = Field(description="time to first token once a slot is held, seconds")
    tokens_per_s: DistSpec = Field(description="generation speed, output tokens per second")
    stall: StallSpec | None = None
    error_rate: Annotated[float, Field(ge=0, lt=1)] = 0.0
    invalid_rate: Annotated[float, Field(ge=0, lt=1)] = 0.0

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
    serves: Annotated[dict[Name, ServingSpec], Field(min_length=1)]


class PriceSpec(Spec):
    """US dollars per million tokens."""

    input: NonNegativeFloat = 0.0
    output: NonNegativeFloat = 0.0


class ModelSpec(Spec):
    """A model: its list prices and a quality score in [0, 1]."""

    price_per_mtok: PriceSpec = PriceSpec()
    quality: Probability = 1.0


class StepSpec(Spec):
    """One LLM step of the workflow."""

    id: Name
    model: Name
    input_tokens: Annotated[int, Field(ge=0)] = 1000
    output_tokens: Annotated[int, Field(ge=1)] = 200
    after: list[Name] = Field(default_factory=list)
    required: bool = True
    provider: Name | None = Field(
        default=None, description="default: the first provider (in file order) serving the model"
    )


class WorkflowSpec(Spec):
    """The steps; a step starts once every step in its `after` has succeeded."""

    steps: Annotated[list[StepSpec], Field(min_length=1)]


class WaitPolicy(Spec):
    """One attempt at a time, each allowed `timeout_s`, `retries` more after any failure."""

    kind: Literal["wait"]
    timeout_s: PositiveFloat | None = None
    retries: Annotated[int, Field(ge=0)] = 0
    providers: list[Name] | None = Field(
        default=None, description="attempt k runs on providers[k mod n]; default: the step's"
    )


class CutPolicy(Spec):
    """As wait, but every attempt is cut at `cutoff` (seconds or a pilot percentile)."""

    kind: Literal["cut"]
    cutoff: Threshold
    retries: Annotated[int, Field(ge=0)] = 1
    providers: list[Name] | None = None


class RacePolicy(Spec):
    """`attempts` calls at once over `providers` in turn; the first valid answer wins."""

    kind: Literal["race"]
    attempts: Annotated[int, Field(ge=1)] = 2
    providers: list[Name] | None = None
    retries: Annotated[int, Field(ge=0)] = Field(
        default=0, description="whole new races after every attempt of one failed"
    )
    timeout_s: PositiveFloat | None = None


class HedgePolicy(Spec):
    """One call on the step's provider; without a valid answer `after` its start, one more."""

    kind: Literal["hedge"]
    after: Threshold
    providers: list[Name] | None = Field(
        default=None, description="hedges go to these in turn; default: the step's provider"
    )
    hedges: Annotated[int, Field(ge=1)] = Field(
        default=1, description="extra calls at most; each fires `after` past the previous one"
    )


class DownshiftPolicy(Spec):
    """Cut the step's model at `cutoff`, then retry on the faster model `to`."""

    kind: Literal["downshift"]
    cutoff: Threshold
    to: Name
    retries: Annotated[int, Field(ge=1)] = Field(default=1, description="attempts on `to`")
    providers: list[Name] | None = None


PolicySpec = Annotated[
    WaitPolicy | CutPolicy | RacePolicy | HedgePolicy | DownshiftPolicy,
    Field(discriminator="kind"),
]
POLICY_KINDS = ("wait", "cut", "race", "hedge", "downshift")


class ArrivalsSpec(Spec):
    """When requests arrive: Poisson, on/off bursts with the same mean rate, or a trace replay."""

    kind: Literal["poisson", "bursty", "trace"] = "poisson"
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

    _times: np.ndarray | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _trace_needs_file(self) -> ArrivalsSpec:
        if self.kind == "trace" and self.file is None:
            raise FieldError(("file",), "missing: kind 'trace' needs a file of timestamps")
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


class CustomersSpec(Spec):
    """How customers behave after a failure."""

    retry: CustomerRetrySpec = CustomerRetrySpec()


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
    """A grid of key-path overrides run by `tailsim sweep`."""

    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = Field(default_factory=dict)
    replications: Annotated[int, Field(ge=1)] = 1


class Scenario(Spec):
    """A whole scenario, validated once at the edge and trusted inside."""

    name: Name
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    deadline_s: PositiveFloat = 120.0
    requests: Annotated[int, Field(ge=1)] = 1000
    arrivals: ArrivalsSpec = ArrivalsSpec()
    customers: CustomersSpec = CustomersSpec()
    models: Annotated[dict[Name, ModelSpec], Field(min_length=1)]
    providers: Annotated[dict[Name, ProviderSpec], Field(min_length=1)]
    workflow: WorkflowSpec
    policies: Annotated[dict[Name, PolicySpec], Field(min_length=1)]
    pilot: PilotSpec = PilotSpec()
    billing: BillingSpec = BillingSpec()
    sweep: SweepSpec | None = None

    @model_validator(mode="after")
    def _check_references(self) -> Scenario:
        problems = list(self._reference_problems())
        if problems:
            raise FieldError(*problems[0], *problems[1:])
        return self

    def _reference_problems(self) -> Iterator[tuple[Path, str]]:
        """Every cross-reference problem, each with its key path."""
        models = set(self.models)
        for pname, provider in self.providers.items():
            for mname in provider.serves:
                if mname not in models:
                    yield (
                        ("providers", pname, "serves", mname),
                        f"unknown model '{mname}'{_choices(mname, models)}",
                    )
        steps = self.workflow.steps
        seen: dict[str, int] = {}
        for i, step in enumerate(steps):
            base: Path = ("workflow", "steps", i)
            if step.id in seen:
                yield (*base, "id"), f"duplicate step id '{step.id}' (also steps[{seen[step.id]}])"
            seen.setdefault(step.id, i)
            if step.model not in models:
                yield (
                    (*base, "model"),
                    f"unknown model '{step.model}'{_choices(step.model, models)}",
                )
            elif step.provider is not None:
                if step.provider not in self.providers:
                    yield (
                        (*base, "provider"),
                        f"unknown provider '{step.provider}'"
                        + _choices(step.provider, self.providers),
                    )
                elif step.model not in self.providers[step.provider].serves:
                    yield (
                        (*base, "provider"),
                        f"provider '{step.provider}' does not serve model '{step.model}'",
                    )
            elif not self.serving_providers(step.model):
                yield (*base, "model"), f"no provider serves model '{step.model}'"
        ids = {s.id for s in steps}
        for i, step in enumerate(steps):
            for j, dep in enumerate(step.after):
                if dep not in ids:
                    yield (
                        ("workflow", "steps", i, "after", j),
                        f"unknown step '{dep}'{_choices(dep, ids)}",
                    )
                elif dep == step.id:
                    yield ("workflow", "steps", i, "after", j), "a step cannot come after itself"
        cycle = _find_cycle({s.id: [d for d in s.after if d in ids] for s in steps})
        if cycle:
            yield ("workflow", "steps"), "dependency cycle: " + " -> ".join(cycle)
        yield from self._policy_problems()
        yield from self._quota_problems()

    def _policy_problems(self) -> Iterator[tuple[Path, str]]:
        for name, policy in self.policies.items():
            for j, pname in enumerate(policy.providers or []):
                if pname not in self.providers:
                    yield (
                        ("policies", name, "providers", j),
                        f"unknown provider '{pname}'{_choices(pname, self.providers)}",
                    )
            if isinstance(policy, DownshiftPolicy):
                if policy.to not in self.models:
                    yield (
                        ("policies", name, "to"),
                        f"unknown model '{policy.to}'{_choices(policy.to, self.models)}",
                    )
                elif not self.serving_providers(policy.to):
                    yield ("policies", name, "to"), f"no provider serves model '{policy.to}'"

    def _quota_problems(self) -> Iterator[tuple[Path, str]]:
        for pname, provider in self.providers.items():
            if provider.tpm is None:
                continue
            biggest = max(
                (s.input_tokens + s.output_tokens for s in self.workflow.steps), default=0
            )
            if biggest > provider.tpm:
                yield (
                    ("providers", pname, "tpm"),
                    f"must be at least one call's tokens ({biggest}), or no call is ever admitted",
                )

    def serving_providers(self, model: str) -> list[str]:
        """Providers serving `model`, in file order."""
        return [p for p, spec in self.providers.items() if model in spec.serves]

    def step_provider(self, step: StepSpec) -> str:
        """The provider a step runs on by default."""
        return step.provider or self.serving_providers(step.model)[0]


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
