"""From a policy spec to the runtime policy that executes it, its attempts planned per step.

`build_policy` turns one plain spec (thresholds already in seconds per step, as the pilot
resolves them) into a `sim.policy.kinds` object with an `Attempt` plan per step: routes over the
providers serving each model, give-up times, hedges, fall-down and fall-up models.
`build_resolved` does it for a policy whose steps run different specs (per-step entries,
flattened by `sim.policy.perstep.effective_specs`), sharing one runtime policy per spec.
"""

from __future__ import annotations

from sim.model.config import (
    THRESHOLD_FIELDS,
    AdaptivePolicy,
    CutPolicy,
    DraftPolicy,
    HedgePolicy,
    PlainPolicy,
    RacePolicy,
    RouterPolicy,
    StreamCuts,
    WaitPolicy,
)
from sim.model.workflow import Step
from sim.policy.kinds import Adaptive, Draft, Hedge, PerStep, Race, Sequential
from sim.policy.plans import AdaptivePlan, Attempt, DraftPlan, Policy
from sim.policy.router import Router
from sim.policy.routes import Routes


def _route(routes: Routes, model: str, providers: list[str] | None, default: str) -> list[str]:
    """Providers an attempt on `model` may use, in turn (those of `providers` serving it)."""
    if not providers:
        return [default]
    serving = [p for p in providers if routes.serves_model(p, model)]
    return serving or [default]


def build_resolved(
    name: str, specs: dict[str, PlainPolicy], routes: Routes, steps: tuple[Step, ...]
) -> Policy:
    """The runtime policy of per-step specs whose thresholds are seconds (`resolve_specs`).

    Steps sharing a spec share one runtime policy; a policy with one spec for every LLM step is
    exactly `build_policy` of it. Tool steps get no plan (the engine runs them,
    `sim.policy.actions`):
    their specs, thresholds unresolved, are never built."""
    groups: dict[str, list[Step]] = {}
    for step in steps:
        if step.tool is not None:
            continue
        groups.setdefault(specs[step.id].model_dump_json(), []).append(step)
    built: dict[str, Policy] = {}
    for members in groups.values():
        spec = specs[members[0].id]
        fields = THRESHOLD_FIELDS.get(type(spec), ())
        seconds = {s.id: float(getattr(specs[s.id], fields[0])) for s in members} if fields else {}
        runtime = build_policy(name, spec, routes, tuple(members), seconds)
        if len(groups) == 1:
            return runtime
        built.update(dict.fromkeys((s.id for s in members), runtime))
    per_step = PerStep(name, built)
    # one set of load-aware controls for the whole policy (its state is per simulation)
    per_step.controls = next(iter(specs.values())).controls if specs else None
    return per_step


def _other_route(
    routes: Routes, model: str, providers: list[str] | None, step: Step
) -> tuple[str, ...]:
    """Providers for attempts on `model` at `step`: `providers` serving it, else the step's
    provider if it serves it, else the first that does."""
    default = (
        step.provider if routes.serves_model(step.provider, model) else routes.serving(model)[0]
    )
    return tuple(_route(routes, model, providers, default))


def _seconds(value: float | str | None, fallback: float | None) -> float | None:
    """A threshold already in seconds, or `fallback` (the resolved main threshold)."""
    if value is None or isinstance(value, float | int):
        return None if value is None else float(value)
    if fallback is None:
        raise ValueError(f"threshold {value!r} not resolved to seconds (see sim.study.pilot)")
    return fallback


def build_policy(
    name: str,
    spec: PlainPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Policy:
    """The runtime policy of a spec, with its load-aware controls (if any); tool steps are
    run by `sim.policy.actions`, not by a policy."""
    steps = tuple(s for s in steps if s.tool is None)
    policy = _build_policy(name, spec, routes, steps, seconds)
    policy.controls = spec.controls
    return policy


def _build_policy(
    name: str,
    spec: PlainPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Policy:
    """The runtime policy of a spec; `seconds[step]` is its threshold resolved for that step
    (an `adaptive` or `draft` spec's other thresholds must already be in seconds)."""
    if isinstance(spec, AdaptivePolicy):
        return _build_adaptive(name, spec, routes, steps, seconds)
    if isinstance(spec, RouterPolicy):
        return Router(name, spec, routes)
    if isinstance(spec, DraftPolicy):
        plans = {}
        for step in steps:
            draft_route = _other_route(routes, spec.model, spec.providers, step)
            within = _seconds(spec.upgrade_within, seconds.get(step.id))
            plans[step.id] = DraftPlan(
                Attempt(step.provider, step.model, None),
                Attempt(draft_route[0], spec.model, None),
                float(within),  # type: ignore[arg-type]
            )
        return Draft(name, plans)
    if isinstance(spec, WaitPolicy | CutPolicy):
        give_up = spec.timeout_s if isinstance(spec, WaitPolicy) else None
        plans = {}
        for step in steps:
            route = _route(routes, step.model, spec.providers, step.provider)
            limit = give_up if isinstance(spec, WaitPolicy) else seconds[step.id]
            plans[step.id] = [
                Attempt(route[k % len(route)], step.model, limit, *stream_cuts(spec))
                for k in range(spec.retries + 1)
            ]
        return Sequential(name, plans, spec.backoff)
    if isinstance(spec, RacePolicy):
        rounds = {}
        for step in steps:
            route = _route(routes, step.model, spec.providers, step.provider)
            one = [
                Attempt(route[j % len(route)], step.model, spec.timeout_s, *stream_cuts(spec))
                for j in range(spec.attempts)
            ]
            rounds[step.id] = [one] * (spec.retries + 1)
        return Race(name, rounds, spec.backoff)
    if isinstance(spec, HedgePolicy):
        plans = {}
        for step in steps:
            route = _route(routes, step.model, spec.providers, step.provider)
            hedges = [Attempt(route[h % len(route)], step.model, None) for h in range(spec.hedges)]
            plans[step.id] = [Attempt(step.provider, step.model, None), *hedges]
        return Hedge(name, plans, seconds)
    plans = {}
    for step in steps:
        down_default = (
            step.provider
            if routes.serves_model(step.provider, spec.to)
            else routes.serving(spec.to)[0]
        )
        route = _route(routes, spec.to, spec.providers, down_default)
        cuts = stream_cuts(spec)
        first = Attempt(step.provider, step.model, seconds[step.id], *cuts)
        rest = [Attempt(route[k % len(route)], spec.to, None, *cuts) for k in range(spec.retries)]
        plans[step.id] = [first, *rest]
    return Sequential(name, plans, spec.backoff)


def stream_cuts(spec: object) -> tuple[float | None, float | None]:
    """A spec's cuts that watch the stream (`first_token_timeout_s`, `idle_timeout_s`), as the
    `Attempt` fields after `give_up_after`; (None, None) for a kind without them."""
    if isinstance(spec, StreamCuts):
        return spec.first_token_timeout_s, spec.idle_timeout_s
    return None, None


def _build_adaptive(
    name: str,
    spec: AdaptivePolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Adaptive:
    plans = {}
    for step in steps:
        models = {step.model, spec.fall_down, spec.fall_up} - {None}
        by_model = {
            m: _other_route(routes, m, spec.providers, step) for m in models if m is not None
        }
        plans[step.id] = AdaptivePlan(
            model=step.model,
            routes=by_model,
            cutoff=float(_seconds(spec.cutoff, seconds.get(step.id))),  # type: ignore[arg-type]
            ttft_cutoff=_seconds(spec.ttft_cutoff, None),
            hedge_after=_seconds(spec.hedge_after, None),
            fall_down=spec.fall_down,
            fall_up=spec.fall_up,
            attempts=spec.attempts,
            reserve=spec.reserve_s or 0.0,
        )
    return Adaptive(name, plans)


def calls_at_once(spec: object) -> int:
    """How many calls a step under `spec` starts at once: a race's attempts, a draft beside
    its primary, else one (for estimates: memory, and which policy to start first)."""
    if isinstance(spec, RacePolicy):
        return spec.attempts
    return 2 if isinstance(spec, DraftPolicy) else 1
