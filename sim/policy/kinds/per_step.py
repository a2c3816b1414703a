"""The kind `per_step`: a different runtime policy per step (a policy with per-step entries).

Its spec is never built as it is: `sim.policy.build.build_resolved` flattens it to each step's
plain spec, builds those, and `combined` joins them. `single_policy` turns a combination whose
steps all run one class with the same settings back into one policy of that class (a cutoff
resolved to different seconds per step makes one), so the vectorized engine may run it.
"""

from __future__ import annotations

from typing import Any

from sim.model.config import ControlsSpec, PerStepPolicy
from sim.model.workflow import Step
from sim.policy.kinds.base import Kind
from sim.policy.plans import Policy, StepGenerator, StepRun
from sim.policy.routes import Routes


class PerStep(Policy):
    """A different runtime policy per step (a policy with per-step entries)."""

    def __init__(self, name: str, by_step: dict[str, Policy]) -> None:
        self.name = name
        self.by_step = by_step
        self.watches_flights = any(p.watches_flights for p in by_step.values())

    def execute(self, run: StepRun) -> StepGenerator:
        return self.by_step[run.step.id].execute(run)


def combined(name: str, by_step: dict[str, Policy], controls: ControlsSpec | None) -> Policy:
    """The policy running each step as `by_step[step]`, under one set of load-aware controls
    (their state is per simulation)."""
    policy = PerStep(name, by_step)
    policy.controls = controls
    return policy


def single_policy(policy: Policy) -> Policy:
    """A per-step policy whose steps all run the same class with the same settings as one
    policy of that class with every step's plans (`Policy.merge`); anything else as it is."""
    if not isinstance(policy, PerStep):
        return policy
    kinds = {type(m) for m in policy.by_step.values()}
    if len(kinds) != 1:
        return policy
    flat = kinds.pop().merge(policy.name, policy.by_step)
    if flat is None:
        return policy
    flat.controls = policy.controls
    return flat


def _build(
    name: str, spec: Any, routes: Routes, steps: tuple[Step, ...], seconds: dict[str, float]
) -> Policy:
    raise ValueError(
        f"policy '{name}': a per_step spec is built step by step (sim.policy.build.build_resolved)"
    )


PER_STEP = Kind("per_step", PerStepPolicy, _build)
#: The kinds of this module, for the registry.
KINDS = (PER_STEP,)
