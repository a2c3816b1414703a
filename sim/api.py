"""The notebook face of sweeps and reports, mirroring `tailsim sweep` and `tailsim report`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sim.model.config import Scenario
from sim.model.scenario import load_scenario, with_overrides
from sim.study.sweep import SweepPoint, SweepResult, run_sweep, with_engine


def sweep(
    scenario: Scenario | str | Path | None = None,
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
    spec = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if seed is not None:
        spec = with_overrides(spec, {"seed": seed})
    if engine is not None:
        spec = with_engine(spec, engine)
    return run_sweep(
        spec,
        requests=requests,
        policies=policies,
        executor=executor,
        workers=workers,
        scheduler=scheduler,
        progress=progress,
    )


def report(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write folder/report.html (or `out`) for a run or sweep folder; returns its path."""
    from sim.output.report_html import write_report  # noqa: PLC0415 - slow import, on demand

    return write_report(Path(folder), Path(out) if out is not None else None)
