"""The plan's types: what a scenario compiles to, frozen and picklable.

A `Plan` holds everything a run reads, each part resolved once: the serving paths' latency laws
and per-token prices, the providers' limits and client rules, the workflow's steps with their
indices, and per policy a `PolicyPlan` (its plain spec at every step, its deadline rules, its
thresholds in seconds once the pilot has measured them, and the features it uses, which the
engine choice checks against what each engine supports). The plan also keeps the scenario it
was compiled from, for what only the format can do: recompiling with overrides (a sweep's
point, a tuning candidate) and the resolved YAML a run folder keeps. No engine reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.model.config import (
    ArrivalsSpec,
    ControlsSpec,
    CustomersSpec,
    DifficultySpec,
    FirstSignalSpec,
    HardnessSpec,
    PlainPolicy,
    ProviderSpec,
    ServingSpec,
    SloSpec,
    SweepSpec,
    WhenHardSpec,
)
from sim.model.hardness import Hardness
from sim.model.latency import CallLatency
from sim.model.workflow import Workflow
from sim.policy.build import build_resolved
from sim.policy.deadlines import DeadlineRules
from sim.policy.plans import Policy
from sim.policy.routes import Routes

if TYPE_CHECKING:
    from sim.model.config import Scenario

#: The pilot's samples: per step id its successful latencies (s, queue included), and per
#: (step id, FIRST_TOKEN) their first-token latencies.
Measured = Mapping[Any, np.ndarray]
#: The suffix of a step's first-token samples in `Measured`.
FIRST_TOKEN = "first-token"  # noqa: S105 - a sample key, not a secret


@dataclass(frozen=True)
class Feature:
    """Something a policy run uses that not every engine implements: its name (what engines
    list as supported) and where the scenario sets it (the key path a reason names)."""

    name: str
    where: str

    @property
    def reason(self) -> str:
        """Why an engine that lacks it cannot run the policy, in the `engine:` line's words."""
        return self.where if " " in self.where else f"{self.where} is set"


@dataclass(frozen=True)
class ServingPlan:
    """A model as one provider serves it: its latency law, prices (USD per token) and the
    format's serving entry (its own quotas)."""

    provider: str
    model: str
    latency: CallLatency
    price_input: float
    price_output: float
    spec: ServingSpec


@dataclass(frozen=True)
class ProviderPlan:
    """One provider: its limits, client rules, overhead, slowdown and bad spells (the format's
    entry), and the models it serves, in file order."""

    name: str
    spec: ProviderSpec
    servings: Mapping[str, ServingPlan]


@dataclass(frozen=True)
class ModelPlan:
    """One model: its answer quality, prices (USD per token) and what a hard request does."""

    name: str
    quality: float
    price_input: float
    price_output: float
    when_hard: WhenHardSpec | None
    #: False where the scenario sets no `price_per_mtok` (a placeholder: $0 is not free).
    priced: bool = True


@dataclass(frozen=True)
class PolicyPlan:
    """One policy, compiled: its written kind, its plain spec at every step (thresholds in
    seconds once resolved), its deadline rules, load-aware controls and features."""

    name: str
    kind: str
    #: Per step id, the plain spec as written (per-step entries flattened; 'pNN' kept).
    written: Mapping[str, PlainPolicy]
    #: Per step id, the plain spec it runs (every threshold in seconds once `resolved`).
    specs: Mapping[str, PlainPolicy]
    rules: DeadlineRules
    #: Per LLM step, its main threshold in seconds (`cutoff`, `after`, `upgrade_within`).
    thresholds: Mapping[str, float]
    controls: ControlsSpec | None
    features: tuple[Feature, ...]
    #: Admission's expected attempt time per step (None: admission off).
    expected: Mapping[str, float] | None = None
    resolved: bool = False
    #: Calls a step starts at once under the policy as written (a race's attempts, else 1):
    #: what the memory estimate counts per step.
    calls_per_step: float = 1.0
    #: Calls started at once, summed over the steps (a race's attempts, a draft's two, else 1):
    #: which policies a pool starts first.
    weight: int = 0


@dataclass(frozen=True)
class Plan:
    """A scenario compiled once (see the module docstring)."""

    name: str
    #: What error messages call the scenario: its file, else its name.
    source: str
    #: The folder its relative file names resolve from (None: built from a mapping).
    source_dir: str | None
    source_file: str | None
    seed: int
    requests: int
    deadline_s: float
    first_signal_s: float | None
    #: `first_signal`: the step whose first token the person sees, and its target (None: off).
    first_signal: FirstSignalSpec | None
    warmup_s: float
    timeseries_bin_s: float
    quality_floor: float
    engine: str
    slo: SloSpec | None
    pilot_requests: int
    arrivals: ArrivalsSpec
    customers: CustomersSpec
    #: `billing.cancelled`: what a cancelled call that held a slot is billed (full, elapsed, none).
    billing: str
    difficulty: DifficultySpec | None
    hardness_spec: HardnessSpec | None
    models: Mapping[str, ModelPlan]
    providers: Mapping[str, ProviderPlan]
    workflow: Workflow
    reserve_s: float
    routes: Routes
    policies: Mapping[str, PolicyPlan]
    sweep: SweepSpec | None
    #: The scenario it was compiled from: for recompiling and its resolved YAML only.
    scenario: Scenario = field(repr=False, compare=False)
    #: The seed the pilot measured its thresholds on (None: nothing was measured). A run on
    #: another seed measures again (`sim.study.pilot.prepare`); `tailsim nines` keeps the
    #: thresholds of the scenario's own seed across its batches' seeds on purpose.
    measured_on: int | None = None

    # ------------------------------------------------------------------ derived, once

    @cached_property
    def latencies(self) -> dict[tuple[str, str], CallLatency]:
        """The latency law of every (provider, model) serving path, in file order."""
        return {
            (p.name, s.model): s.latency
            for p in self.providers.values()
            for s in p.servings.values()
        }

    @cached_property
    def hardness(self) -> Hardness | None:
        """Hard requests' effects (None when no call can change)."""
        return Hardness.build(
            self.hardness_spec,
            {m.name: m.when_hard for m in self.models.values()},
            self.latencies,
        )

    @property
    def provider_specs(self) -> dict[str, ProviderSpec]:
        """Every provider's format entry, by name in file order."""
        return {name: p.spec for name, p in self.providers.items()}

    @property
    def model_quality(self) -> dict[str, float]:
        """Every model's answer quality."""
        return {name: m.quality for name, m in self.models.items()}

    @property
    def signal_step(self) -> str | None:
        """The step whose first token the person sees (`first_signal.step`), or None."""
        return self.first_signal.step if self.first_signal is not None else None

    @property
    def tool_steps(self) -> frozenset[str]:
        """Ids of the tool steps: run by the engine, so no policy threshold applies to them."""
        return frozenset(s.id for s in self.workflow.steps if s.tool is not None)

    def tpm_quotas(self) -> dict[tuple[str, str | None], int]:
        """Every TPM quota: (provider, None) for a provider's, (provider, model) for a model's."""
        quotas: dict[tuple[str, str | None], int] = {}
        for name, provider in self.providers.items():
            if provider.spec.tpm:
                quotas[(name, None)] = provider.spec.tpm
            for model, serving in provider.servings.items():
                if serving.spec.tpm:
                    quotas[(name, model)] = serving.spec.tpm
        return quotas

    # ------------------------------------------------------------------ policies

    def runtime(self, name: str) -> Policy:
        """A fresh runtime policy of `name` (its state is per simulation: never share one)."""
        policy = self.policies[name]
        if not policy.resolved:
            raise ValueError(f"policy {name!r} of {self.name} has unresolved thresholds")
        return build_resolved(name, dict(policy.specs), self.routes, self.workflow.steps)
