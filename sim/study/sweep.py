"""Sweeps: a grid (and paired `zip` lists) of key-path overrides x replications, each point a
full `sim.run`.

`expand` turns the scenario's `sweep:` block into points (`sim.study.points`); `run_point` runs
one (on any executor: it needs nothing but its arguments); `run_points` runs them on an
executor, handing each finished point to the caller (who stores it: this module writes no file);
`run_sweep` runs them all in memory and stacks their tables (`sim.study.result.SweepResult`),
with one column per swept key plus `replication` and `seed`.

Seeds: a point's seed is a function of the scenario's seed and the point's replication
coordinate only (`replication_seed`), never of execution order, so results are byte-identical on
every executor and worker count. The grid coordinates deliberately do not enter the seed:
replication r sees the same draws at every grid point (common random numbers across the grid as
well as across policies), so a curve over the grid is paired, not noisy point to point.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from sim.analysis.capacity import REQUESTS
from sim.model.errors import ScenarioError
from sim.model.streams import Streams
from sim.plan import Plan, recompile
from sim.study.executors import Executor
from sim.study.points import PointResult, SweepPoint
from sim.study.result import SweepResult
from sim.study.runner import run


def replication_seed(seed: int, replication: int) -> int:
    """The seed of replication `replication`, the same at every grid point: replication 0 runs
    on the scenario's own seed (so it equals a plain `tailsim run` of that point), the others on
    seeds derived from it by name."""
    if replication == 0:
        return seed
    rng = Streams(seed, "replication", replication).generator("seed")
    return int(rng.integers(0, 2**31 - 1))


def swept_keys(plan: Plan) -> list[str]:
    """The swept key paths in column order: grid keys, then zip keys."""
    spec = plan.sweep
    return [*spec.grid, *spec.zip] if spec is not None else []


def with_engine(plan: Plan, engine: str, source: str = "") -> Plan:
    """The plan with `engine` in place of its own (`tailsim sweep --engine`, as `tailsim run
    --engine`): set in the scenario, every point runs it and a stored sweep is keyed by it.
    Refused when the sweep itself varies `engine`."""
    if "engine" in swept_keys(plan):
        raise ScenarioError(
            source or plan.name,
            [("sweep", "varies `engine` per point: drop --engine, or `engine` from the sweep")],
        )
    return recompile(plan, {"engine": engine}, source=source)


def expand(plan: Plan) -> list[SweepPoint]:
    """Every (grid values, zip index, replication) of the plan's sweep, keys checked first.

    The zip lists form one axis (their i-th values together), crossed with the grid's product."""
    spec = plan.sweep
    grid: dict[str, list[Any]] = dict(spec.grid) if spec is not None else {}
    paired: dict[str, list[Any]] = dict(spec.zip) if spec is not None else {}
    replications = spec.replications if spec is not None else 1
    _check_keys(plan, grid, "grid")
    _check_keys(plan, paired, "zip")
    zipped = [
        dict(zip(paired, values, strict=True)) for values in zip(*paired.values(), strict=True)
    ] or [{}]
    points: list[SweepPoint] = []
    for values in itertools.product(*grid.values()):
        for pair in zipped:
            overrides = {**dict(zip(grid, values, strict=True)), **pair}
            for rep in range(replications):
                seed = replication_seed(plan.seed, rep)
                points.append(SweepPoint(len(points), overrides, rep, seed))
    return points


def _check_keys(plan: Plan, grid: dict[str, list[Any]], kind: str) -> None:
    """Each swept key must name an existing key and every value must give a valid scenario."""
    problems: list[tuple[str, str]] = []
    for key, values in grid.items():
        for value in values:
            try:
                recompile(plan, {key: value})
            except ScenarioError as exc:
                details = "; ".join(f"{p or key}: {m}" for p, m in exc.problems)
                problems.append((f"sweep.{kind}.{key}", f"value {value!r} gives: {details}"))
                break
    if problems:
        raise ScenarioError(plan.source, problems)


def run_point(
    plan: Plan,
    point: SweepPoint,
    keys: Sequence[str],
    requests: int | None = None,
    policies: Sequence[str] | None = None,
) -> PointResult:
    """Run one point and tag its tables; a pure function of its arguments (any process may)."""
    import time  # noqa: PLC0415

    began = time.perf_counter()
    varied = recompile(plan, point.overrides) if point.overrides else plan
    # a point keeps its requests table (the sweep's figures and requests.parquet), not its calls
    result = run(varied, requests=requests, seed=point.seed, policies=policies, records=REQUESTS)
    return PointResult(
        point=point,
        summary=tag(result.summary, point, list(keys)),
        requests=tag(result.requests, point, list(keys)),
        wall_s=time.perf_counter() - began,
    )


def run_sweep(
    plan: Plan,
    *,
    requests: int | None = None,
    policies: Sequence[str] | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, SweepPoint], None] | None = None,
) -> SweepResult:
    """Run every point on `executor` ('inline', 'processes' or 'dask') and stack the tables in
    plan order; `progress(done, total, point)` is told as each point finishes."""
    points = expand(plan)
    keys = swept_keys(plan)
    results: list[PointResult] = []

    def finished(result: PointResult) -> None:
        results.append(result)
        if progress is not None:
            progress(len(results), len(points), result.point)

    with Executor(executor, workers, scheduler) as pool:
        run_points(pool, plan, points, keys, requests=requests, policies=policies, on_done=finished)
    return stack(plan, points, keys, results)


def run_points(
    pool: Executor,
    plan: Plan,
    points: Sequence[SweepPoint],
    keys: Sequence[str],
    *,
    requests: int | None,
    policies: Sequence[str] | None,
    on_done: Callable[[PointResult], None],
) -> None:
    """Run `points` on `pool` (an entered Executor); `on_done(result)` is called in this process
    as each one finishes: where the caller stores it (`tailsim sweep` writes its part), for
    this layer writes no file."""
    args = (list(keys), requests, list(policies) if policies else None)
    pool.each(run_point, plan, points, args, on_done)


def stack(
    plan: Plan, points: list[SweepPoint], keys: list[str], results: list[PointResult]
) -> SweepResult:
    """One SweepResult from point results in any order (sorted into plan order)."""
    ordered = sorted(results, key=lambda r: r.point.index)
    return SweepResult(
        points=points,
        summary=pd.concat([r.summary for r in ordered], ignore_index=True),
        requests=pd.concat([r.requests for r in ordered], ignore_index=True),
        keys=keys,
        plan=plan,
    )


def label(value: Any) -> Any:
    """A swept value as a table cell: a mapping or list (a count law, say) as its compact JSON
    text, so the point's columns stay hashable for grouping; a scalar as it is."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(", ", ": "))
    return value


def tag(table: pd.DataFrame, point: SweepPoint, keys: list[str]) -> pd.DataFrame:
    """The table with the point's swept values, replication and seed as leading columns."""
    tags: dict[str, Any] = {k: [label(point.overrides[k])] * len(table) for k in keys}
    tags["replication"] = np.full(len(table), point.replication, dtype=np.int64)
    tags["seed"] = np.full(len(table), point.seed, dtype=np.int64)
    return pd.concat([pd.DataFrame(tags, index=table.index), table], axis=1)
