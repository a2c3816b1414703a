"""Per-step entries of policies, flattened: what policy `name` really runs step `step` with.

A policy may carry `steps: {step: entry}`, and a `per_step` policy is nothing but such a map
(with a `default`). An entry names another policy, gives a whole policy (with `kind`), or
overrides keys of the policy it sits in. `plain_spec` follows names and applies overrides over
the scenario's policies map and returns one plain policy spec, or raises `StepPolicyError` with
the key path of what cannot be flattened (unknown policies, cycles, bad keys). It is part of the
format: `Scenario`'s validation runs it for every (policy, step) (`step_problems`), and
`sim.policy.perstep` hands its results to the runtime.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from sim.model.config.policies import PerStepPolicy, PlainPolicy, PolicySpec, StepOverride
from sim.model.errors import Path

#: Policy keys about the request's deadline: they apply to the whole policy, never per step.
DEADLINE_KEYS = ("propagate_deadline", "admission")
_ADAPTER: TypeAdapter[Any] = TypeAdapter(PolicySpec)


class StepPolicyError(ValueError):
    """An entry that cannot be flattened, with the key path of the problem."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def plain_spec(policies: dict[str, PolicySpec], name: str, step: str) -> PlainPolicy:
    """The plain spec policy `name` of `policies` runs step `step` with (raises
    `StepPolicyError`)."""
    return _resolve(policies, name, step, ())


def _resolve(
    policies: dict[str, PolicySpec], name: str, step: str, stack: tuple[str, ...]
) -> PlainPolicy:
    if name in stack:
        chain = " -> ".join((*stack, name))
        raise StepPolicyError(("policies", stack[0], "steps", step), f"policy cycle: {chain}")
    spec = policies.get(name)
    if spec is None:
        where = ("policies", stack[-1], "steps", step) if stack else ("policies",)
        known = ", ".join(policies)
        raise StepPolicyError(where, f"unknown policy '{name}' (known: {known})")
    stack = (*stack, name)
    if isinstance(spec, PerStepPolicy):
        if step in spec.steps:
            plain = _entry(policies, spec.steps[step], None, step, stack, ("steps", step))
        else:
            plain = _entry(policies, spec.default, None, step, stack, ("default",))
        if spec.controls is not None:  # the map's own controls apply to every step
            plain = plain.model_copy(update={"controls": spec.controls})
        return plain
    base = spec.model_copy(update={"steps": None})
    entry = (spec.steps or {}).get(step)
    if entry is None:
        return base
    return _entry(policies, entry, base, step, stack, ("steps", step))


def _entry(
    policies: dict[str, PolicySpec],
    entry: StepOverride,
    base: PlainPolicy | None,
    step: str,
    stack: tuple[str, ...],
    at: Path,
) -> PlainPolicy:
    """One entry: a policy name, a policy with `kind`, or overrides of `base`."""
    where: Path = ("policies", stack[-1], *at)
    if isinstance(entry, str):
        if entry not in policies:
            known = ", ".join(policies)
            raise StepPolicyError(where, f"unknown policy '{entry}' (known: {known})")
        return _resolve(policies, entry, step, stack)
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
