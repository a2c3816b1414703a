"""From a policy spec to the runtime policy that executes it, its attempts planned per step.

`build_policy` turns one plain spec (thresholds already in seconds per step, as the pilot
resolves them) into its kind's runtime policy (`sim.policy.kinds`, each kind's `build`) with
its plan per step: routes over the providers serving each model, give-up times, hedges,
fall-down and fall-up models. `build_resolved` does it for a policy whose steps run different
specs (per-step entries, flattened by `sim.policy.perstep.effective_specs`), sharing one
runtime policy per spec.
"""

from __future__ import annotations

from sim.model.config import THRESHOLD_FIELDS, PlainPolicy
from sim.model.workflow import Step
from sim.policy.kinds import kind_of
from sim.policy.kinds.per_step import combined
from sim.policy.plans import Policy
from sim.policy.routes import Routes


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
    # one set of load-aware controls for the whole policy (its state is per simulation)
    return combined(name, built, next(iter(specs.values())).controls if specs else None)


def build_policy(
    name: str,
    spec: PlainPolicy,
    routes: Routes,
    steps: tuple[Step, ...],
    seconds: dict[str, float],
) -> Policy:
    """The runtime policy of a spec, with its load-aware controls (if any); `seconds[step]` is
    its main threshold resolved for that step (an `adaptive` or `draft` spec's other thresholds
    must already be in seconds). Tool steps are run by `sim.policy.actions`, not by a policy."""
    steps = tuple(s for s in steps if s.tool is None)
    policy = kind_of(spec).build(name, spec, routes, steps, seconds)
    policy.controls = spec.controls
    return policy


def calls_at_once(spec: object) -> int:
    """How many calls a step under `spec` starts at once: a race's attempts, a draft beside
    its primary, else one (its kind's `calls_at_once`: the order policies go to workers)."""
    return kind_of(spec).calls_at_once(spec)
