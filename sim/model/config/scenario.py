"""The scenario root: `Scenario`, the part that holds every other, and its own subjects.

Owns arrivals, customers (re-sends, disconnects), the pilot, billing of cancelled calls, hard
requests, sweeps, and `Scenario` itself with the validators that need the whole of it (per-step
maps and their entries' problems, cross-references, hardness, the reserve within the
deadline). Loading YAML, reading referenced files and formatting errors live in
`sim.model.scenario`; this package only says what a valid scenario is, so the engine can import
it without touching files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, PrivateAttr, model_validator

from sim.model.config.base import Name, NonNegativeFloat, PositiveFloat, Probability, Spec
from sim.model.config.perstep import StepPolicyError, plain_spec
from sim.model.config.policies import MODEL_FIELDS, PolicySpec
from sim.model.config.providers import (
    BackoffSpec,
    DifficultySpec,
    DistSpec,
    ModelSpec,
    ProviderSpec,
)
from sim.model.config.references import _mapping, _sequence, reference_problems
from sim.model.config.slo import SloSpec
from sim.model.config.workflow import StepSpec, WorkflowSpec
from sim.model.errors import FieldError, Path
from sim.model.thresholds import expected_step_problems


class HardnessSpec(Spec):
    """Which requests are hard: each with probability `share`, drawn once per request on a
    stream of its own, so every attempt, re-send and policy of a hard request meets it."""

    share: Probability = Field(description="share of requests that are hard, in [0, 1]")


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


class FirstSignalSpec(Spec):
    """The first token as the person sees it: the first token of the answer of the step that
    streams to them (in a chain usually the last one, not the first)."""

    step: Name = Field(description="the llm step whose answer the person sees stream")
    target_s: PositiveFloat | None = Field(
        default=None,
        description="target time from arrival to that first token, s (user_ttft_hit_rate)",
    )


class Scenario(Spec):
    """A whole scenario, validated once at the edge and trusted inside."""

    name: Name
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    deadline_s: PositiveFloat = 120.0
    first_signal_s: PositiveFloat | None = Field(
        default=None, description="target time to the first token of the first step, s"
    )
    first_signal: FirstSignalSpec | None = Field(
        default=None,
        description="the step whose first token the person sees: {step, target_s}; its "
        "user_ttft_* metrics (none: NaN)",
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
    slo: SloSpec | None = Field(
        default=None,
        description="a promised success probability, shown as nines with its CI and met / "
        "missed / undecided by run, sweep and report, and searched against by tune",
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
            problems = step_problems(self)
        if problems:
            raise FieldError(*problems[0], *problems[1:])
        return self

    @model_validator(mode="after")
    def _first_signal_step(self) -> Scenario:
        signal = self.first_signal
        if signal is None:
            return self
        kinds = {step.id: step.kind for step in self.workflow.steps}
        llm = [name for name, kind in kinds.items() if kind == "llm"]
        if signal.step not in kinds:
            raise FieldError(
                ("first_signal", "step"),
                f"'{signal.step}' is not a step of the workflow; allowed: {', '.join(llm)}",
            )
        if kinds[signal.step] != "llm":
            raise FieldError(
                ("first_signal", "step"),
                f"'{signal.step}' is a tool step, which streams no tokens; allowed (llm steps): "
                + ", ".join(llm),
            )
        return self

    @model_validator(mode="after")
    def _hard_requests(self) -> Scenario:
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


def hardness_problems(scenario: Scenario) -> list[tuple[tuple[str | int, ...], str]]:
    """Problems of the hardness keys, each with its key path: a model's `when_hard` without
    `hardness` (it would change nothing), and a hard junk rate that leaves a serving no room
    (its `error_rate` + `when_hard.invalid_rate` must be < 1)."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for name, model in scenario.models.items():
        when = model.when_hard
        if when is None:
            continue
        where = ("models", name, "when_hard")
        if scenario.hardness is None:
            message = "set, but no request is hard: add `hardness: {share: ...}` at the top level"
            problems.append((where, message))
        if when.invalid_rate is None:
            continue
        for provider, spec in scenario.providers.items():
            serving = spec.serves.get(name)
            if serving is not None and serving.error_rate + when.invalid_rate >= 1:
                problems.append(
                    (
                        (*where, "invalid_rate"),
                        f"providers.{provider}.serves.{name}.error_rate + this must be < 1, got "
                        f"{serving.error_rate + when.invalid_rate:g}",
                    )
                )
    return problems


def step_problems(scenario: Scenario) -> list[tuple[Path, str]]:
    """Every problem of the policies' per-step entries, each with its key path."""
    problems: list[tuple[Path, str]] = []
    ids = {s.id for s in scenario.workflow.steps}
    models = set(scenario.models)
    for name, spec in scenario.policies.items():
        for step in spec.steps or {}:
            if step not in ids:
                problems.append(
                    (
                        ("policies", name, "steps", step),
                        f"unknown step '{step}' (known: {', '.join(sorted(ids))})",
                    )
                )
        for step in sorted(ids):
            try:
                plain = plain_spec(scenario.policies, name, step)
            except StepPolicyError as exc:
                problems.append((exc.path, exc.message))
                continue
            for field in MODEL_FIELDS.get(plain.kind, ()):
                model = getattr(plain, field)
                if model is None:
                    continue
                where = _where(spec, name, step, field)
                if model not in models:
                    problems.append(
                        (where, f"unknown model '{model}' (known: {', '.join(sorted(models))})")
                    )
                elif not scenario.serving_providers(model):
                    problems.append((where, f"no provider serves model '{model}'"))
    problems += expected_step_problems(scenario.policies, [s.id for s in scenario.workflow.steps])
    return list(dict.fromkeys(problems))


def _where(spec: Any, name: str, step: str, field: str) -> Path:
    """Key path of `field` as it applies to `step` (in the step's entry if it has one)."""
    entry = (spec.steps or {}).get(step)
    if isinstance(entry, dict):
        return ("policies", name, "steps", step, field)
    return ("policies", name, field)
