"""Per-step policies: what each step of each policy really runs, after names and overrides.

A policy may carry `steps: {step: entry}`, and a `per_step` policy is nothing but such a map
(with a `default`). An entry names another policy, gives a whole policy (with `kind`), or
overrides keys of the policy it sits in. `effective_specs` flattens all of that into one plain
policy spec per (policy, step), so the runtime never sees names or overrides; `step_problems`
says, with key paths, what cannot be flattened (unknown steps or policies, cycles, bad keys).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from sim.model.config import (
    MODEL_FIELDS,
    PerStepPolicy,
    PlainPolicy,
    PolicySpec,
    Scenario,
    StepOverride,
)
from sim.model.thresholds import expected_step_problems

Path = tuple[str | int, ...]
#: Policy keys about the request's deadline: they apply to the whole policy, never per step.
DEADLINE_KEYS = ("propagate_deadline", "admission")
_ADAPTER: TypeAdapter[Any] = TypeAdapter(PolicySpec)


class StepPolicyError(ValueError):
    """An entry that cannot be flattened, with the key path of the problem."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def effective_specs(scenario: Scenario) -> dict[str, dict[str, PlainPolicy]]:
    """Per policy and step, the plain spec that runs it (no `steps`, no names, no per_step)."""
    return {
        name: {s.id: effective_spec(scenario, name, s.id) for s in scenario.workflow.steps}
        for name in scenario.policies
    }


def effective_spec(scenario: Scenario, name: str, step: str) -> PlainPolicy:
    """The plain spec policy `name` runs step `step` with (raises `StepPolicyError`)."""
    return _resolve(scenario, name, step, ())


def is_plain(scenario: Scenario, name: str) -> bool:
    """True if policy `name` runs every step with its own spec (no per-step entries)."""
    spec = scenario.policies[name]
    return not isinstance(spec, PerStepPolicy) and not spec.steps


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
                plain = effective_spec(scenario, name, step)
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


def _resolve(scenario: Scenario, name: str, step: str, stack: tuple[str, ...]) -> PlainPolicy:
    if name in stack:
        chain = " -> ".join((*stack, name))
        raise StepPolicyError(("policies", stack[0], "steps", step), f"policy cycle: {chain}")
    spec = scenario.policies.get(name)
    if spec is None:
        where = ("policies", stack[-1], "steps", step) if stack else ("policies",)
        known = ", ".join(scenario.policies)
        raise StepPolicyError(where, f"unknown policy '{name}' (known: {known})")
    stack = (*stack, name)
    if isinstance(spec, PerStepPolicy):
        if step in spec.steps:
            plain = _entry(scenario, spec.steps[step], None, step, stack, ("steps", step))
        else:
            plain = _entry(scenario, spec.default, None, step, stack, ("default",))
        if spec.controls is not None:  # the map's own controls apply to every step
            plain = plain.model_copy(update={"controls": spec.controls})
        return plain
    base = spec.model_copy(update={"steps": None})
    entry = (spec.steps or {}).get(step)
    if entry is None:
        return base
    return _entry(scenario, entry, base, step, stack, ("steps", step))


def _entry(
    scenario: Scenario,
    entry: StepOverride,
    base: PlainPolicy | None,
    step: str,
    stack: tuple[str, ...],
    at: Path,
) -> PlainPolicy:
    """One entry: a policy name, a policy with `kind`, or overrides of `base`."""
    where: Path = ("policies", stack[-1], *at)
    if isinstance(entry, str):
        if entry not in scenario.policies:
            known = ", ".join(scenario.policies)
            raise StepPolicyError(where, f"unknown policy '{entry}' (known: {known})")
        return _resolve(scenario, entry, step, stack)
    if "steps" in entry:
        raise StepPolicyError((*where, "steps"), "a step's entry cannot have steps of its own")
    for key in DEADLINE_KEYS:
        if key in entry:
            raise StepPolicyError(
                (*where, key),
                f"{key} is the whole request's: set it on policies.{stack[0]}, not per step",
            )
    if "kind" in entry:
        data = dict(entry)
    elif base is None:
        raise StepPolicyError(where, "give a policy name or a policy with 'kind'")
    else:
        data = {**base.model_dump(exclude_none=True, exclude={"steps"}), **entry}
    if data.get("kind") == "per_step":
        raise StepPolicyError((*where, "kind"), "a step's entry cannot be a per_step map")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = tuple(p for p in first["loc"] if p != data.get("kind"))
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = f"unknown key for kind '{data.get('kind')}'"
        return _raise(StepPolicyError((*where, *loc), message[0].lower() + message[1:]))


def _raise(error: StepPolicyError) -> Any:
    raise error
