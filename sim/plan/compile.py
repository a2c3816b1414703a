"""The compiler: a validated `Scenario` in, one `Plan` out (thresholds to resolve by the pilot).

Everything the layers above would otherwise re-derive from the scenario is worked out here,
once: each serving path's latency law and per-token prices, the workflow's steps, the routes
policies take, every policy's plain spec per step (per-step entries flattened by the format),
its deadline rules and the features it uses. `recompile` applies key-path overrides to the
scenario a plan came from (a sweep's point, another seed) and compiles again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sim.model.config import PlainPolicy, Scenario, plain_spec
from sim.model.latency import CallLatency
from sim.model.scenario import absolute_files, with_overrides
from sim.model.thresholds import expected_of, percentile_of
from sim.model.workflow import Workflow
from sim.plan.features import (
    behaviour_features,
    client_features,
    latency_features,
    scenario_features,
    spec_features,
)
from sim.plan.plan import ModelPlan, Plan, PolicyPlan, ProviderPlan, ServingPlan
from sim.plan.resolve import needs_pilot, resolve
from sim.policy.deadlines import DeadlineRules
from sim.policy.kinds import kind_of
from sim.policy.routes import Routes


def compile_scenario(scenario: Scenario) -> Plan:
    """The plan of `scenario`: resolved at once where nothing needs the pilot, else with its
    policies as written (resolve them with `sim.plan.resolve` once the pilot has measured what
    they need)."""
    models = {
        name: ModelPlan(
            name,
            spec.quality,
            spec.price_per_mtok.input / 1e6,
            spec.price_per_mtok.output / 1e6,
            spec.when_hard,
            "price_per_mtok" in spec.model_fields_set,
        )
        for name, spec in scenario.models.items()
    }
    providers = {
        name: ProviderPlan(
            name,
            spec,
            {
                model: ServingPlan(
                    name,
                    model,
                    CallLatency.from_spec(serving),
                    models[model].price_input,
                    models[model].price_output,
                    serving,
                )
                for model, serving in spec.serves.items()
            },
        )
        for name, spec in scenario.providers.items()
    }
    workflow = Workflow.from_spec(scenario.workflow, scenario.step_provider)
    routes = Routes(
        tuple((name, frozenset(spec.serves)) for name, spec in scenario.providers.items()),
        tuple(scenario.models),
    )
    latencies = {
        (p.name, s.model): s.latency for p in providers.values() for s in p.servings.values()
    }
    shared = scenario_features(scenario)
    after = [
        *behaviour_features(scenario),
        *latency_features(latencies),
        *client_features(scenario.providers),
    ]
    policies = {name: _policy(scenario, name, shared, after) for name in scenario.policies}
    plan = Plan(
        name=scenario.name,
        source=scenario.source,
        source_dir=scenario.source_dir,
        source_file=scenario.source_file,
        seed=scenario.seed,
        requests=scenario.requests,
        deadline_s=scenario.deadline_s,
        first_signal_s=scenario.first_signal_s,
        first_signal=scenario.first_signal,
        warmup_s=scenario.warmup_s,
        timeseries_bin_s=scenario.timeseries_bin_s,
        quality_floor=scenario.quality_floor,
        engine=scenario.engine,
        slo=scenario.slo,
        pilot_requests=scenario.pilot.requests,
        arrivals=scenario.arrivals,
        customers=scenario.customers,
        billing=scenario.billing.cancelled,
        difficulty=scenario.difficulty,
        hardness_spec=scenario.hardness,
        models=models,
        providers=providers,
        workflow=workflow,
        reserve_s=scenario.workflow.reserve_s,
        routes=routes,
        policies=policies,
        sweep=scenario.sweep,
        scenario=scenario,
    )
    return plan if needs_pilot(plan) else resolve(plan, None)


def _policy(scenario: Scenario, name: str, shared: list, after: list) -> PolicyPlan:
    """One policy as written: its plain spec per step, rules (admission to resolve) and
    features (the scenario's settings, its own, then re-sends and its laws')."""
    spec = scenario.policies[name]
    written: dict[str, PlainPolicy] = {
        s.id: plain_spec(scenario.policies, name, s.id) for s in scenario.workflow.steps
    }
    rules = DeadlineRules(
        getattr(spec, "propagate_deadline", True),
        scenario.workflow.reserve_s,
        _expected_seconds(scenario, name),
    )
    features = (*shared, *spec_features(spec, f"policies.{name}"), *after)
    controls = next(iter(written.values())).controls if written else None
    kind = kind_of(spec)
    return PolicyPlan(
        name, kind.name, written, written, rules, {}, controls, features,
        calls_per_step=float(kind.calls_per_step(spec)),
        weight=sum(kind_of(s).calls_at_once(s) for s in written.values()),
    )  # fmt: skip


def _expected_seconds(scenario: Scenario, name: str) -> dict[str, float] | None:
    """Admission's expected attempt time per step where every one is given in seconds (None:
    admission off, or a 'pNN' the pilot must measure: `sim.plan.resolve` fills it in)."""
    admission = getattr(scenario.policies[name], "admission", None)
    if admission is None:
        return None
    values = {s.id: expected_of(admission.expected, s.id) for s in scenario.workflow.steps}
    if any(percentile_of(v) is not None for v in values.values()):
        return None
    return {step: float(v) for step, v in values.items()}


def recompile(plan: Plan, overrides: Mapping[str, Any], source: str = "") -> Plan:
    """The plan of `plan`'s scenario with dotted key paths replaced (validated again; a
    `ScenarioError` names the key), its policies as written."""
    return compile_scenario(with_overrides(plan.scenario, overrides, source))


def with_seed(plan: Plan, seed: int) -> Plan:
    """The same plan on seed `seed` (to resolve again where the pilot measured thresholds:
    they move with the seed, see `Plan.measured_on`)."""
    return plan if seed == plan.seed else replace(plan, seed=seed)


def resolved_data(plan: Plan) -> dict[str, Any]:
    """The scenario with every default explicit and file names absolute (as a run folder's
    `scenario.resolved.yaml` keeps it, and a sweep's fingerprint reads it)."""
    scenario = plan.scenario
    data = scenario.model_dump(mode="json", exclude_none=True)
    absolute_files(data, Path(scenario.source_dir or "."))
    return data
