"""Workflow and steps: what one request asks for, step by step.

Owns a step (an LLM call or a tool's external action), its answer length, post-call validator,
budgets and dependencies, and the workflow that orders the steps. Turned into the runtime
`sim.model.workflow.Workflow` once per run.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sim.model.config.base import Name, NonNegativeFloat, PositiveFloat, Probability, Spec
from sim.model.config.counts import GroupSpec, LoopSpec, MapSpec, RepeatSpec, WhenSpec
from sim.model.config.providers import DistSpec, MedianP99Spec
from sim.model.errors import FieldError


class LengthSpec(MedianP99Spec):
    """An answer length that varies per call: a lognormal from its median and p99 (tokens)."""

    median: Annotated[float, Field(ge=1, allow_inf_nan=False)]
    p99: Annotated[float, Field(gt=0, allow_inf_nan=False)]


class ValidatorSpec(Spec):
    """A post-call check of a step's answers: catches a share of invalid ones, for a price."""

    catches: Probability = Field(description="share of invalid answers it rejects")
    latency_s: NonNegativeFloat = Field(default=0.0, description="seconds per check")
    cost: NonNegativeFloat = Field(default=0.0, description="USD per check")


class ToolSpec(Spec):
    """A side-effect step's external action: the remote commits it `commit_s` after the submit
    (unless it refuses with a transient error, with `error_rate`), and its confirmation reaches
    the workflow `confirm_s` after the commit. `idempotent`: submits carry an idempotency key
    (request and step), so the remote recognises a second submit and commits once."""

    commit_s: DistSpec = Field(description="submit to the remote's commit, seconds")
    confirm_s: DistSpec = Field(
        default=DistSpec(dist="constant", value=0.0),
        description="commit to the confirmation reaching the workflow, seconds",
    )
    error_rate: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.0, description="the remote refuses (transient, nothing committed)"
    )
    idempotent: bool = Field(default=False, description="submits carry an idempotency key")
    retries: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="re-submits after a refusal, or after an unknown outcome if idempotent",
    )


class StepSpec(Spec):
    """One step of the workflow: an LLM call (`kind: llm`) or an external action (`kind: tool`)."""

    id: Name
    kind: Literal["llm", "tool"] = "llm"
    model: Name | None = Field(default=None, description="required for kind llm")
    input_tokens: Annotated[int, Field(ge=0)] = 1000
    output_tokens: Annotated[int, Field(ge=1)] | LengthSpec = Field(
        default=200, description="answer tokens: a number, or {median, p99} drawn per call"
    )
    max_tokens: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="the answer's token cap sent with the call: a longer answer is cut there "
        "(truncated, invalid); providers with charge: max_tokens reserve it at admission "
        "(default: none; they reserve output_tokens, or a drawn length's p99)",
    )
    validator: ValidatorSpec | None = Field(
        default=None,
        description="post-call check; without one, junk is caught perfectly and for free",
    )
    after: list[Name] = Field(default_factory=list)
    required: bool = True
    provider: Name | None = Field(
        default=None, description="default: the first provider (in file order) serving the model"
    )
    budget_s: PositiveFloat | None = Field(
        default=None, description="step budget: queue waits and every attempt and retry, s"
    )
    queue_budget_s: PositiveFloat | None = Field(
        default=None, description="longest wait of one call for a provider slot, s"
    )
    attempt_budget_s: PositiveFloat | None = Field(
        default=None,
        description="longest service of one attempt once it holds a slot (besides the "
        "policy's cut, which counts the queue wait too), s",
    )
    tool: ToolSpec | None = Field(default=None, description="kind tool: the external action")
    stream: bool = Field(
        default=False,
        description="the call streams its answer: a provider's sdk timeout_s is then the "
        "client's read timeout (openai, httpx): the longest wait for the first token, which "
        "the client retries, and for each next token mid-stream, which it does not",
    )
    when: WhenSpec | None = Field(
        default=None, description="runs only then (skipped: not a failure, dependants go on)"
    )
    repeat: RepeatSpec | None = Field(default=None, description="re-asked while invalid")
    loop: LoopSpec | None = Field(default=None, description="iterations one after another")
    map: MapSpec | None = Field(default=None, description="parallel copies, joined")

    @model_validator(mode="after")
    def _one_flow(self) -> StepSpec:
        """At most one of repeat, loop and map on a step (each names what a call's `iteration`
        counts), and none on a tool step (its action is not iterated)."""
        given = [key for key in ("repeat", "loop", "map") if getattr(self, key) is not None]
        if len(given) > 1:
            raise FieldError((given[1],), f"a step takes one of repeat, loop and map, not {given}")
        if given and self.kind == "tool":
            raise FieldError((given[0],), "not on a step of kind 'tool' (only when is)")
        return self

    @model_validator(mode="after")
    def _kind_fields(self) -> StepSpec:
        if self.kind == "llm" and self.model is None:
            raise FieldError(("model",), "missing (required): a step of kind 'llm' needs a model")
        if self.kind == "llm" and self.tool is not None:
            raise FieldError(("tool",), "only a step of kind 'tool' takes a tool")
        if self.kind == "tool":
            if self.tool is None:
                raise FieldError(("tool",), "missing: a step of kind 'tool' needs a tool")
            for key in ("model", "provider"):
                if getattr(self, key) is not None:
                    raise FieldError((key,), "a step of kind 'tool' calls no model")
        return self

    @model_validator(mode="after")
    def _cap_holds_the_answer(self) -> StepSpec:
        """`max_tokens` at least `output_tokens` (a drawn length's median), as the format says:
        a lower cap cuts every answer (or most), and the run would fail far from the cause."""
        if self.max_tokens is None:
            return self
        length = self.output_tokens
        if isinstance(length, int) and self.max_tokens < length:
            raise FieldError(
                ("max_tokens",),
                f"{self.max_tokens} is below output_tokens ({length}): every answer would be cut "
                f"there (truncated); give max_tokens >= {length}, or lower output_tokens",
            )
        if isinstance(length, LengthSpec) and self.max_tokens < length.median:
            raise FieldError(
                ("max_tokens",),
                f"{self.max_tokens} is below the median drawn length (output_tokens.median "
                f"{length.median:g}): most answers would be cut there (truncated); give "
                f"max_tokens >= {math.ceil(length.median)} (a cap between the median and the p99 "
                "cuts the long tail only)",
            )
        return self

    @property
    def reserved_output(self) -> int:
        """The answer's token cap: `max_tokens`, else `output_tokens` (a drawn length's p99)."""
        if self.max_tokens is not None:
            return self.max_tokens
        length = self.output_tokens
        return length if isinstance(length, int) else math.ceil(length.p99)


class WorkflowSpec(Spec):
    """The steps; a step starts once every step in its `after` has succeeded."""

    steps: Annotated[list[StepSpec], Field(min_length=1)]
    reserve_s: NonNegativeFloat = Field(
        default=0.0,
        description="time kept after the last step for validation and delivery: an answer is "
        "delivered this long after it, and attempts get the time left minus it, s",
    )

    groups: dict[Name, GroupSpec] = Field(
        default_factory=dict, description="named chains of steps that loop together"
    )

    @model_validator(mode="after")
    def _groups_are_chains(self) -> WorkflowSpec:
        """A group's steps are known LLM steps without keys of their own, in no other group,
        each (but the first) after exactly the one before it, and nothing outside the group
        waits on any but its last: the group runs as one step, iteration after iteration."""
        specs = {s.id: s for s in self.steps}
        owner: dict[str, str] = {}
        for name, group in self.groups.items():
            where = ("groups", name)
            if name in specs:
                raise FieldError(where, f"'{name}' is a step's id: give the group its own name")
            for j, sid in enumerate(group.steps):
                spec = specs.get(sid)
                if spec is None:
                    known = ", ".join(sorted(specs))
                    raise FieldError((*where, "steps", j), f"unknown step '{sid}' (known: {known})")
                if sid in owner:
                    raise FieldError(
                        (*where, "steps", j), f"'{sid}' is already in group '{owner[sid]}'"
                    )
                owner[sid] = name
                keys = [k for k in ("when", "repeat", "loop", "map") if getattr(spec, k)]
                if keys or spec.kind == "tool":
                    what = f"has {keys[0]}" if keys else "is a tool step"
                    raise FieldError((*where, "steps", j), f"'{sid}' {what}: not in a group")
                if j and spec.after != [group.steps[j - 1]]:
                    raise FieldError(
                        (*where, "steps", j),
                        f"'{sid}' must come after exactly '{group.steps[j - 1]}' (the group is "
                        f"a chain in its order), it has after: {spec.after}",
                    )
            inner = set(group.steps[:-1])
            for spec in self.steps:
                waits = inner.intersection(spec.after) if spec.id not in group.steps else set()
                if waits:
                    raise FieldError(
                        (*where, "steps"),
                        f"step '{spec.id}' waits on '{sorted(waits)[0]}' inside the group: a "
                        f"step outside it may come after its last step ('{group.steps[-1]}') only",
                    )
        return self

    @model_validator(mode="after")
    def _when_reads_an_ancestor(self) -> WorkflowSpec:
        """`when.step` must be a step this one (transitively) comes after: its answer is known
        before this step could start."""
        parents = {s.id: s.after for s in self.steps}
        for i, spec in enumerate(self.steps):
            if spec.when is None or spec.when.step is None:
                continue
            seen: set[str] = set()
            todo = list(spec.after)
            while todo:
                sid = todo.pop()
                if sid not in seen:
                    seen.add(sid)
                    todo.extend(parents.get(sid, ()))
            if spec.when.step not in seen:
                known = ", ".join(sorted(seen)) or "none: the step comes after nothing"
                raise FieldError(
                    ("steps", i, "when", "step"),
                    f"'{spec.when.step}' is not a step '{spec.id}' comes after (its ancestors: "
                    f"{known})",
                )
        return self
