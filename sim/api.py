"""The library's face: `run`, `sweep` and `report`, mirroring `tailsim run`, `sweep` and `report`.

The study layer computes a run or a sweep and gives its tables as data (`sim.study.result`);
here they become the public results, whose `.save()` and `.plot()` call the output layer (result
folders, the sweep store, figures). The study layer never writes files or draws; this module,
above both, joins them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from sim.model.version import __version__
from sim.output.results import ECDF_FIGURE_POINTS, write_results
from sim.plan import Plan, compile_scenario, recompile
from sim.rare.nines import NinesResult, estimate_nines
from sim.study import result as study
from sim.study import runner
from sim.study.points import SweepPoint
from sim.study.sweep import run_sweep, with_engine

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class RunResult(study.RunResult):
    """The tables of one run of a scenario (see `sim.study.result.RunResult`), which save and
    plot themselves."""

    @classmethod
    def of(cls, result: study.RunResult) -> RunResult:
        """The public result of the study layer's `result` (the same tables, not copied)."""
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    @property
    def scenario(self) -> Scenario:
        """The scenario that ran (its plan's source)."""
        return self.plan.scenario

    def save(self, folder: str | Path, figures: bool = True) -> Path:
        """Write the run's result files to `folder` (as `tailsim run --out` does)."""
        return write_results(self, Path(folder), self.plan.name, __version__, figures)

    def plot(self) -> Figure:
        """The run's comparison figure (latency against the deadline; the trade), for a notebook."""
        from sim.output.plots import policy_comparison  # noqa: PLC0415 - slow import, on demand

        return policy_comparison(
            self.summary,
            self.latency_table(ECDF_FIGURE_POINTS),
            self.plan.deadline_s,
            self.plan.name,
        )


class SweepResult(study.SweepResult):
    """Stacked tables of every point of a sweep (see `sim.study.result.SweepResult`), which
    save and plot themselves."""

    @classmethod
    def of(cls, result: study.SweepResult) -> SweepResult:
        """The public result of the study layer's `result` (the same tables, not copied)."""
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    @property
    def scenario(self) -> Scenario | None:
        """The swept scenario (its plan's source; None when stacked without one)."""
        return self.plan.scenario if self.plan is not None else None

    def save(self, folder: str | Path, figures: bool = True) -> Path:
        """Write the sweep's result files to `folder` (as `tailsim sweep` does); returns it."""
        from sim.output.store import save_sweep  # noqa: PLC0415 - files are the store's job

        if self.plan is None:
            raise ScenarioError("sweep", [("", "no scenario attached; cannot save")])
        return save_sweep(self, Path(folder), figures=figures)

    def plot(self) -> Figure:
        """The sweep figure (hit rate with CI bands, $/success, $/request against the first
        swept key), for a notebook."""
        from sim.output.plots import sweep_figure  # noqa: PLC0415 - slow import, on demand

        name = self.plan.name if self.plan is not None else ""
        return sweep_figure(self.aggregate, self.keys, name)


def _plan(scenario: Plan | Scenario | str | Path | None) -> Plan:
    """The compiled plan of a Scenario, a YAML path, or (None) the bundled default."""
    if isinstance(scenario, Plan):
        return scenario
    if isinstance(scenario, Scenario):
        return compile_scenario(scenario)
    if scenario is None or isinstance(scenario, str | Path):
        return compile_scenario(load_scenario(scenario))
    raise ScenarioError(
        "scenario", [("", f"expected a Scenario or a YAML path, got {type(scenario).__name__}")]
    )


def run(
    scenario: Plan | Scenario | str | Path | None = None,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    progress: Callable[[str, int], None] | None = None,
    stop: Callable[[], bool] | None = None,
    engine: str | None = None,
    records: str | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
) -> RunResult:
    """Simulate the chosen policies (all by default) and return their tables; `.save(dir)` and
    `.plot()` on the result. The options are `sim.study.runner.run`'s (as `tailsim run`'s)."""
    result = runner.run(
        _plan(scenario),
        requests=requests,
        seed=seed,
        policies=policies,
        progress=progress,
        stop=stop,
        engine=engine,
        records=records,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
    )
    return RunResult.of(result)


def sweep(
    scenario: Plan | Scenario | str | Path | None = None,
    *,
    requests: int | None = None,
    seed: int | None = None,
    policies: Sequence[str] | None = None,
    executor: str = "inline",
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Callable[[int, int, SweepPoint], None] | None = None,
    engine: str | None = None,
) -> SweepResult:
    """Run a scenario's sweep (a Scenario, a YAML path, or the bundled default) and return the
    stacked tables; `.aggregate`, `.save(dir)` and `.plot()` on the result. `engine` overrides
    the scenario's `engine:` at every point (as `tailsim sweep --engine`)."""
    plan = _plan(scenario)
    if seed is not None:
        plan = recompile(plan, {"seed": seed})
    if engine is not None:
        plan = with_engine(plan, engine)
    result = run_sweep(
        plan,
        requests=requests,
        policies=policies,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
    )
    return SweepResult.of(result)


def report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write folder/report.html (or `out`) for a run or sweep folder; returns its path."""
    from sim.output.report_html import write_report  # noqa: PLC0415 - slow import, on demand

    return write_report(Path(folder), Path(out) if out is not None else None)


def nines(
    scenario: Plan | Scenario | str | Path | None,
    policies: Sequence[str] | None = None,
    target_rel_error: float = 0.1,
    budget_s: float = 60.0,
    **options: Any,
) -> NinesResult:
    """Each policy's deadline-miss probability with its 95% CI by importance sampling, as
    `tailsim nines` prints it (`.table` is nines.csv; `.stopped_by` says whether the target or
    the wall-clock `budget_s` ended it, `.machine_dependent` whether the budget shaped the
    numbers); `options` are `sim.rare.nines.estimate_nines`'s (seed, method, batch, pilot,
    attempts, engine, max_runs)."""
    return estimate_nines(
        _plan(scenario), list(policies) if policies else None, target_rel_error, budget_s,
        **options,
    )  # fmt: skip
