"""The kind `race`: `attempts` calls at once; the first valid answer wins, the rest are
cancelled."""

from __future__ import annotations

from typing import Any

from sim.model.config import BackoffSpec, RacePolicy
from sim.model.workflow import Step
from sim.policy.kinds.base import (
    NEUTRAL,
    STREAM_CUT_FIELDS,
    Kind,
    retry_pause,
    route,
    settle,
    shared_backoff,
    stream_cuts,
)
from sim.policy.plans import Attempt, Policy, StepGenerator, StepRun
from sim.policy.routes import Routes
from sim.policy.vector import VectorRun


class Race(Policy):
    """`attempts` calls at once; the first valid answer wins and the rest are cancelled."""

    vectorized = True

    def __init__(
        self,
        name: str,
        rounds: dict[str, list[list[Attempt]]],
        backoff: BackoffSpec | None = None,
    ) -> None:
        self.name = name
        self.rounds = rounds
        self.backoff = backoff

    def execute(self, run: StepRun) -> StepGenerator:
        attempt = 0
        for number, plans in enumerate(self.rounds[run.step.id]):
            if run.closed or (number > 0 and not run.may_retry()):
                return False
            started = []
            for j, plan in enumerate(plans):
                if j == 0 or run.may_hedge(plan.provider):
                    started.append(run.start(attempt, plan))
                attempt += 1
            pending = started
            while pending:
                yield run.env.any_of(pending)
                won, pending = settle(run, pending)
                if won:
                    return True
            if self.backoff is not None and number + 1 < len(self.rounds[run.step.id]):
                wait = retry_pause(run, self.backoff, number + 1, [p.value for p in started])
                if wait is None:
                    return False
                if wait > 0:
                    yield run.env.timeout(wait)
        return False

    def run_vector(self, run: VectorRun, step: Step, rows: Any, start: Any, deadline: Any) -> Any:
        return run.in_rounds(step, self.rounds[step.id], rows, start, deadline)

    @classmethod
    def merge(cls, name: str, by_step: dict[str, Policy]) -> Policy | None:
        same, backoff = shared_backoff(by_step)
        if not same:
            return None
        return Race(name, {s: m.rounds[s] for s, m in by_step.items()}, backoff)  # type: ignore[attr-defined]


def _build(
    name: str, spec: RacePolicy, routes: Routes, steps: tuple[Step, ...], seconds: dict[str, float]
) -> Race:
    """`retries + 1` rounds of `attempts` calls over `providers` in turn, each given up after
    `timeout_s` (None: never)."""
    rounds = {}
    for step in steps:
        providers = route(routes, step.model, spec.providers, step.provider)
        one = [
            Attempt(providers[j % len(providers)], step.model, spec.timeout_s, *stream_cuts(spec))
            for j in range(spec.attempts)
        ]
        rounds[step.id] = [one] * (spec.retries + 1)
    return Race(name, rounds, spec.backoff)


def _attempts(spec: RacePolicy) -> int:
    return spec.attempts


RACE = Kind(
    "race", RacePolicy, _build, calls_at_once=_attempts, calls_per_step=_attempts,
    vector_fields={**dict.fromkeys(("kind", "attempts", "providers", "retries", "timeout_s"),
                                   NEUTRAL),
                   "backoff": "policy.backoff", **STREAM_CUT_FIELDS},
)  # fmt: skip
#: The kinds of this module, for the registry.
KINDS = (RACE,)
