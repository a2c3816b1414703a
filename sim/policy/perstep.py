"""Per-step policies at run time: what each step of each policy really runs.

A policy's per-step entries (names, whole policies, overrides, `per_step` maps) are part of the
scenario format: `sim.model.config.perstep` flattens them and `Scenario`'s validation reports,
with key paths, what cannot be flattened. Here `effective_specs` hands the runtime one plain
policy spec per (policy, step), so it never sees names or overrides.
"""

from __future__ import annotations

from sim.model.config import PerStepPolicy, PlainPolicy, Scenario, plain_spec


def effective_specs(scenario: Scenario) -> dict[str, dict[str, PlainPolicy]]:
    """Per policy and step, the plain spec that runs it (no `steps`, no names, no per_step)."""
    return {
        name: {s.id: plain_spec(scenario.policies, name, s.id) for s in scenario.workflow.steps}
        for name in scenario.policies
    }


def is_plain(scenario: Scenario, name: str) -> bool:
    """True if policy `name` runs every step with its own spec (no per-step entries)."""
    spec = scenario.policies[name]
    return not isinstance(spec, PerStepPolicy) and not spec.steps
