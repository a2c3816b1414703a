"""The workflow as the engine walks it: steps in order, what each waits for and unlocks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

from sim.model.config import LengthSpec, StepSpec, ToolSpec, ValidatorSpec, WorkflowSpec
from sim.model.flow import Flow


@dataclass(frozen=True, slots=True)
class Step:
    """One step, compiled from its spec with indices the engine can use directly."""

    index: int
    id: str
    model: str
    provider: str  # the provider it runs on by default
    input_tokens: int
    output_tokens: int  # the answer's length; with `length`, its median (the typical answer)
    required: bool
    depends_on: tuple[int, ...]
    unlocks: tuple[int, ...]
    reserved_output: int = 0  # the answer's token cap (max_tokens, else output_tokens)
    length: LengthSpec | None = None  # answer length drawn per call
    max_tokens: int | None = None  # longer answers are cut here (truncated = invalid)
    validator: ValidatorSpec | None = None  # None: junk caught perfectly and for free
    budget_s: float = math.inf  # step budget: queue waits, attempts and retries together
    queue_budget_s: float | None = None  # longest wait of one call for a slot
    attempt_budget_s: float | None = None  # longest time of one attempt
    tool: ToolSpec | None = None  # a side-effect step's action (None: an LLM step)
    stream: bool = False  # the answer streams: the client's timeout is a read timeout
    flow: Flow | None = None  # when / repeat / loop / map (None: runs once, as always)


@dataclass(frozen=True)
class Workflow:
    """A DAG of steps; a step starts the moment every step it depends on has succeeded."""

    steps: tuple[Step, ...]

    @classmethod
    def from_spec(cls, workflow: WorkflowSpec, provider_of: Callable[[StepSpec], str]) -> Workflow:
        """Compile the workflow's steps (already checked to form a DAG); `provider_of(step)` is
        the provider a step runs on by default ("" for a tool step)."""
        specs = workflow.steps
        index = {s.id: i for i, s in enumerate(specs)}
        unlocks: list[list[int]] = [[] for _ in specs]
        for i, spec in enumerate(specs):
            for dep in spec.after:
                unlocks[index[dep]].append(i)
        steps = tuple(
            Step(
                index=i,
                id=spec.id,
                model=spec.model or "",
                provider=provider_of(spec),
                input_tokens=spec.input_tokens,
                output_tokens=(
                    spec.output_tokens
                    if isinstance(spec.output_tokens, int)
                    else max(1, round(spec.output_tokens.median))
                ),
                required=spec.required,
                depends_on=tuple(index[d] for d in spec.after),
                unlocks=tuple(unlocks[i]),
                reserved_output=spec.reserved_output,
                length=None if isinstance(spec.output_tokens, int) else spec.output_tokens,
                max_tokens=spec.max_tokens,
                validator=spec.validator,
                budget_s=math.inf if spec.budget_s is None else spec.budget_s,
                queue_budget_s=spec.queue_budget_s,
                attempt_budget_s=spec.attempt_budget_s,
                tool=spec.tool,
                stream=spec.stream,
                flow=Flow.from_spec(spec, index),
            )
            for i, spec in enumerate(specs)
        )
        if workflow.groups:  # a group runs as its first step's flow (the others: inside it)
            firsts = {
                index[g.steps[0]]: Flow.of_group(n, g, index) for n, g in workflow.groups.items()
            }
            steps = tuple(
                replace(s, flow=firsts[s.index]) if s.index in firsts else s for s in steps
            )
        return cls(steps)

    @cached_property
    def roots(self) -> tuple[Step, ...]:
        """Steps that depend on nothing: they start when the request arrives (computed once:
        every run reads it)."""
        return tuple(s for s in self.steps if not s.depends_on)

    @cached_property
    def waiting_for(self) -> tuple[int, ...]:
        """Per step, how many steps it waits for (a new run's countdown, computed once)."""
        return tuple(len(s.depends_on) for s in self.steps)

    def downstream(self, index: int) -> set[int]:
        """Every step that (transitively) needs step `index`."""
        seen: set[int] = set()
        todo = list(self.steps[index].unlocks)
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                todo.extend(self.steps[i].unlocks)
        return seen
