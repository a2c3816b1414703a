"""What checks rather than simulates: `check` (a scenario is valid for everything `run` and
`sweep` will do with it), `schema` (the format's JSON Schema) and `validate` (the simulator
held to closed-form theory)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.api.inputs import ScenarioLike, plan_of
from sim.api.sweeps import sweep_plan
from sim.model.scenario import json_schema_text
from sim.plan import Plan

if TYPE_CHECKING:
    from sim.study.validation import CheckResult


def check(scenario: ScenarioLike) -> Plan:
    """Validate `scenario` as `run` and `sweep` will, without running it, and return its plan:
    the scenario loads and compiles, and its `sweep:` (when it has one) names only keys that
    exist with values that give a valid scenario. A ScenarioError otherwise."""
    plan = plan_of(scenario)
    if plan.sweep is not None and (plan.sweep.grid or plan.sweep.zip):
        sweep_plan(plan)
    return plan


def schema() -> str:
    """The JSON Schema of the scenario format (for editors), as text."""
    return json_schema_text()


@dataclass(frozen=True)
class Validation:
    """The theory checks: each check's result, the size and seed they ran at, the wall time."""

    results: list[CheckResult]
    size: int
    seed: int
    wall_s: float
    z_tolerance: float

    @property
    def failed(self) -> list[CheckResult]:
        """The checks that failed."""
        return [r for r in self.results if not r.passed]


def validate(size: int | None = None, seed: int | None = None) -> Validation:
    """Hold the simulator to closed-form theory (`sim.study.validation`); `size` simulated
    requests of the base check (others scale from it), `seed` fixed by default."""
    from sim.study.validation import (  # noqa: PLC0415 - the checks' code only when asked
        DEFAULT_SEED,
        DEFAULT_SIZE,
        Z_TOLERANCE,
        run_checks,
    )

    size = DEFAULT_SIZE if size is None else size
    seed = DEFAULT_SEED if seed is None else seed
    started = time.perf_counter()
    results = run_checks(size=size, seed=seed)
    return Validation(results, size, seed, time.perf_counter() - started, Z_TOLERANCE)
