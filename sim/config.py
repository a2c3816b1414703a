"""The scenario's typed, frozen configuration: field rules and cross-references, no I/O.

Loading YAML, reading referenced files and formatting errors live in `sim.scenario`; this module
only says what a valid scenario is, so the engine can import it without touching files.
"""

from __future__ import annotations

import math
import re
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
    """Base of every config object: unknown keys are errors, no type coercion (`true` is not
    a number), objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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
    engine: Literal["auto", "des", "vectorized"] = Field(
        default="auto",
        description="auto: the vectorized engine where it gives the same numbers (nothing shared "
        "between requests), else the event engine; des: always the event engine; vectorized: "
        "always the vectorized engine (an error where it does not apply)",
    )

    _source_dir: str | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_references(self) -> Scenario:
        problems = reference_problems(self.model_dump())
        if problems:
            raise FieldError(*problems[0], *problems[1:])
        return self

    @property
    def source_dir(self) -> str | None:
        """The folder relative file names in this scenario are read from (set by the loader)."""
        return self._source_dir

    def set_source_dir(self, folder: str) -> None:
        """Remember where relative file names resolve (the loader's job, done once)."""
        self._source_dir = folder

    def serving_providers(self, model: str) -> list[str]:
        """Providers serving `model`, in file order."""
        return [p for p, spec in self.providers.items() if model in spec.serves]

    def step_provider(self, step: StepSpec) -> str:
        """The provider a step runs on by default."""
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
        target = policy.get("to")
        if policy.get("kind") == "downshift" and isinstance(target, str) and models:
            if target not in models:
                problems.append(
                    (
                        ("policies", name, "to"),
                        f"unknown model '{target}'{_choices(target, models)}",
                    )
                )
            elif serves and not any(target in served for served in serves.values()):
                problems.append((("policies", name, "to"), f"no provider serves model '{target}'"))
    return problems


def _quota_problems(
    providers: dict[str, dict[str, Any]], steps: list[dict[str, Any]]
) -> list[tuple[Path, str]]:
    sizes = [
        s.get("input_tokens", 1000) + s.get("output_tokens", 200)
        for s in steps
        if isinstance(s.get("input_tokens", 0), int) and isinstance(s.get("output_tokens", 0), int)
    ]
    biggest = max(sizes, default=0)
    problems: list[tuple[Path, str]] = []
    for pname, spec in providers.items():
        tpm = spec.get("tpm")
        if isinstance(tpm, int) and not isinstance(tpm, bool) and 0 < tpm < biggest:
            problems.append(
                (
                    ("providers", pname, "tpm"),
                    f"must be at least one call's tokens ({biggest}), or no call is ever admitted",
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
