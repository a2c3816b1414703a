"""The public results of a run and of a sweep, which save and plot themselves.

The study layer computes a run or a sweep and gives its tables as data (`sim.study.result`);
here they become the public results, whose `.save()` and `.plot()` call the output layer (result
folders, the sweep store, figures). The study layer never writes files or draws; this module,
above both, joins them.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.version import __version__
from sim.output.results import ECDF_FIGURE_POINTS, write_results
from sim.study import result as study

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
