"""What a policy and the engine exchange: planned attempts, the step-run handle, the base.

A policy's route for every attempt (which provider, which model, cut after how long) is a pure
decision made up front: an `Attempt` per attempt, or an `AdaptivePlan` / `DraftPlan` per step.
The engine drives a `Policy` by calling its `execute` (a simpy generator) with a `StepRun`, the
engine's handle on one step (call inline, start a parallel call, cancel one, time left); the
vectorized engine by `run_vector` with its handle (`sim.policy.vector.VectorRun`). Both sides
import these types from here: the policy kinds (`sim.policy.kinds`), their construction from
specs (`sim.policy.build`) and the engines.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from sim.model.config import ControlsSpec
from sim.model.rows import Call
from sim.model.workflow import Step

StepGenerator = Generator[simpy.Event, Any, bool]


@dataclass(frozen=True, slots=True)
class Attempt:
    """Where and how long one attempt runs: provider, model, cut after `give_up_after` seconds;
    the cuts that watch its stream: no first token `first_token_after` seconds after it was
    sent, no token for `idle_after` seconds mid-stream (None: off); `resume`: after a
    mid-stream cut or break of this step, the attempt sends the text received as prefill and
    asks only for the rest (`sim.engine.event_calls`)."""

    provider: str
    model: str
    give_up_after: float | None
    first_token_after: float | None = None
    idle_after: float | None = None
    resume: bool = False


@dataclass(frozen=True, slots=True)
class AdaptivePlan:
    """One step under `adaptive`: its model, routes per model, checks and directions."""

    model: str
    routes: dict[str, tuple[str, ...]]
    cutoff: float
    ttft_cutoff: float | None
    hedge_after: float | None
    fall_down: str | None
    fall_up: str | None
    attempts: int
    reserve: float


@dataclass(frozen=True, slots=True)
class DraftPlan:
    """One step under `draft`: the primary, the draft, and how long an upgrade may take."""

    primary: Attempt
    draft: Attempt
    upgrade_within: float


class StepRun(Protocol):
    """What a policy may do while running one step (implemented by the engine)."""

    env: simpy.Environment
    step: Step

    @property
    def closed(self) -> bool:
        """True once the request is over (deadline passed or failed): start nothing new."""
        ...

    @property
    def time_left(self) -> float:
        """Seconds until the request's deadline."""
        ...

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        """Run one attempt inline and return its call (None if the request closed first)."""
        ...

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        """Start one attempt in parallel; the process's value is its call (or None)."""
        ...

    def cancel(self, process: simpy.Process) -> None:
        """Cancel a parallel attempt still in flight (really interrupts it)."""
        ...

    def jitter(self, retry: int) -> float:
        """The backoff-jitter uniform of this step's retry number `retry` (common to policies)."""
        ...

    def uniform(self, stream: str, number: int) -> float:
        """This step's uniform number `number` of the named stream `stream` (common to every
        policy that reads it: a router's picks and sleeps)."""
        ...

    def accept(self, call: Call) -> None:
        """The step delivers this call's answer (default: the last call that answered ok)."""
        ...

    def note_draft(self, kept: bool) -> None:
        """Count a draft race's result: draft kept, or upgraded to the primary's answer."""
        ...

    def first_token(self, attempt: int) -> bool:
        """True once attempt `attempt` has streamed its first token."""
        ...

    def projected_left(self, attempt: int) -> float:
        """Seconds attempt `attempt` still needs at its recent token rate (inf if none)."""
        ...

    def may_retry(self) -> bool:
        """May a retry (an attempt after a failure) be sent now? (the retry budget)"""
        ...

    def may_hedge(self, provider: str) -> bool:
        """May an extra parallel attempt go to `provider` now? (hedge cap, 429 pause, budget)"""
        ...

    def admits(self, wait: float) -> bool:
        """Deadline-aware admission of a retry after `wait` seconds (counted if refused)."""
        ...


class Policy:
    """A way to execute a step (one kind of `sim.policy.kinds`), with its attempts planned."""

    name: str
    #: Load-aware controls of this policy (sim.policy.controls), None when off.
    controls: ControlsSpec | None = None
    #: Reads its attempts' streaming progress (`StepRun.first_token`, `projected_left`): the
    #: engine keeps each attempt's drawn times for it only when this is True.
    watches_flights: bool = False
    #: Declares a vectorized twin (`run_vector`): the vectorized engine refuses it otherwise.
    vectorized: bool = False

    def execute(self, run: StepRun) -> StepGenerator:
        """Drive one step to success (True) or failure (False)."""
        raise NotImplementedError

    def has_twin(self) -> bool:
        """True if this very class declares a vectorized twin: a subclass, which may execute
        otherwise, does not inherit it."""
        return bool(type(self).__dict__.get("vectorized", False))

    def run_vector(
        self, run: Any, step: Step, rows: Any, start: Any, deadline: Any
    ) -> Any:  # pragma: no cover - the engine checks `vectorized` first
        """The vectorized twin of `execute` for the requests `rows` at `step`, through the
        vectorized engine's handle (`sim.policy.vector.VectorRun`)."""
        raise NotImplementedError(f"policy class {type(self).__name__} is not vectorized")

    @classmethod
    def merge(cls, name: str, by_step: dict[str, Policy]) -> Policy | None:
        """One policy of this class running each step as `by_step[step]` (all of this class)
        does, or None if they cannot be one (`sim.policy.kinds.per_step.single_policy`)."""
        return None
