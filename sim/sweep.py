"""Sweeps: a grid of key-path overrides x replications, each point a full `sim.run`.

`expand` turns the scenario's `sweep:` block into points; `run_sweep` runs them in order and
stacks their summaries, with one column per grid key plus `replication` and `seed`. Replication r
uses the same seed at every grid point (common random numbers across the grid as well as across
policies); replication 0 uses the scenario's seed, the others seeds derived from it by name, so
adding a grid value or a replication never shifts another point's draws.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim.config import Scenario
from sim.errors import ScenarioError
from sim.runner import RunResult, run
from sim.scenario import with_overrides
from sim.streams import Streams


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: overrides by key path, a replication index and its seed."""

    overrides: dict[str, Any]
    replication: int
    seed: int

    def label(self) -> str:
        """`key=value, ...` for progress lines and figures."""
        parts = [f"{k}={v}" for k, v in self.overrides.items()]
        return ", ".join([*parts, f"rep {self.replication}"])


@dataclass
class SweepResult:
    """Stacked tables of every point: the summary, and the per-run table (for plots)."""

    points: list[SweepPoint]
    summary: pd.DataFrame
    requests: pd.DataFrame
    keys: list[str] = field(default_factory=list)


def replication_seed(seed: int, replication: int) -> int:
    """The seed of replication `replication`, the same at every grid point: replication 0 runs
    on the scenario's own seed (so it equals a plain `tailsim run` of that point), the others on
    seeds derived from it by name."""
    if replication == 0:
        return seed
    rng = Streams(seed, "replication", replication).generator("seed")
    return int(rng.integers(0, 2**31 - 1))


def expand(scenario: Scenario) -> list[SweepPoint]:
    """Every (grid values, replication) of the scenario's sweep, grid keys checked up front."""
    spec = scenario.sweep
    grid: dict[str, list[Any]] = dict(spec.grid) if spec is not None else {}
    replications = spec.replications if spec is not None else 1
    _check_keys(scenario, grid)
    keys = list(grid)
    points = []
    for values in itertools.product(*(grid[k] for k in keys)):
        for rep in range(replications):
            overrides = dict(zip(keys, values, strict=True))
            points.append(SweepPoint(overrides, rep, replication_seed(scenario.seed, rep)))
    return points


def _check_keys(scenario: Scenario, grid: dict[str, list[Any]]) -> None:
    """Each grid key must name an existing key and every value must give a valid scenario."""
    problems: list[tuple[str, str]] = []
    for key, values in grid.items():
        for value in values:
            try:
                with_overrides(scenario, {key: value})
            except ScenarioError as exc:
                details = "; ".join(f"{p or key}: {m}" for p, m in exc.problems)
                problems.append((f"sweep.grid.{key}", f"value {value!r} gives: {details}"))
                break
    if problems:
        raise ScenarioError(scenario.name, problems)


def run_sweep(
    scenario: Scenario,
    *,
    requests: int | None = None,
    policies: Sequence[str] | None = None,
    progress: Callable[[int, int, SweepPoint], None] | None = None,
) -> SweepResult:
    """Run every point in order; `progress(done, total, point)` is told before each point."""
    points = expand(scenario)
    keys = list(points[0].overrides) if points else []
    summaries, runs = [], []
    for done, point in enumerate(points):
        if progress is not None:
            progress(done, len(points), point)
        varied = with_overrides(scenario, point.overrides) if point.overrides else scenario
        result: RunResult = run(varied, requests=requests, seed=point.seed, policies=policies)
        summaries.append(_tag(result.summary, point, keys))
        runs.append(_tag(result.requests, point, keys))
    return SweepResult(
        points=points,
        summary=pd.concat(summaries, ignore_index=True),
        requests=pd.concat(runs, ignore_index=True),
        keys=keys,
    )


def _tag(table: pd.DataFrame, point: SweepPoint, keys: list[str]) -> pd.DataFrame:
    """The table with the point's grid values, replication and seed as leading columns."""
    tags = {k: [point.overrides[k]] * len(table) for k in keys}
    tags["replication"] = np.full(len(table), point.replication, dtype=np.int64)
    tags["seed"] = np.full(len(table), point.seed, dtype=np.int64)
    return pd.concat([pd.DataFrame(tags, index=table.index), table], axis=1)
