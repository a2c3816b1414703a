"""What a run and a sweep give: their tables, as data.

`RunResult` (one run: summary, requests, calls, and what is needed to reproduce it) and
`SweepResult` (every point's tables stacked) live here, apart from the runner that computes them
and from the output layer that writes them to folders and draws them: the study layer neither
writes files nor draws figures. `sim.api` gives the public results their `.save()` and `.plot()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sim.analysis.aggregate import aggregate_replications
from sim.analysis.breakdown import breakdown, provider_limits
from sim.analysis.capacity import ALL
from sim.analysis.timeseries import timeseries
from sim.model.arrivals import bursts
from sim.plan import Plan
from sim.policy.actions import no_actions
from sim.study.points import SweepPoint


@dataclass
class RunResult:
    """The tables of one run of a scenario, plus what is needed to reproduce it (its plan,
    resolved: the pilot's thresholds in it)."""

    plan: Plan
    seed: int
    requests_count: int
    thresholds: dict[str, dict[str, float]]
    summary: pd.DataFrame
    requests: pd.DataFrame
    calls: pd.DataFrame
    wall_s: dict[str, float] = field(default_factory=dict)
    #: Per policy, the engine that ran it ("vectorized" or "des"), and why not vectorized.
    engines: dict[str, str] = field(default_factory=dict)
    engine_notes: dict[str, str] = field(default_factory=dict)
    #: Tool steps' action records (actions.parquet), empty without tool steps.
    actions: pd.DataFrame = field(default_factory=no_actions)
    #: Which tables were kept: all, requests (no calls), none (summaries only; see `run`).
    records: str = ALL
    #: Without the requests table: per policy, every counted run's latency_s (for figures).
    latency: dict[str, np.ndarray] = field(default_factory=dict)
    #: Without the calls table: the breakdown, aggregated while the run went.
    breakdown_table: pd.DataFrame | None = None
    #: Where the policies ran (inline, processes, dask) and on how many workers (None: default).
    executor: str = "inline"
    workers: int | None = None

    @property
    def breakdown(self) -> pd.DataFrame:
        """Why each policy did as it did: failures by reason and step, load per provider."""
        if self.breakdown_table is not None:
            return self.breakdown_table
        return breakdown(self.requests, self.calls, provider_limits(self.plan.provider_specs))

    def latency_table(self, points: int | None = None) -> pd.DataFrame:
        """policy and latency_s of the counted runs, for figures: the requests table's, or, for a
        run that kept none, each policy's sorted latencies at `points` evenly spaced ranks (all
        of them if None): the same ECDF, in a table that does not grow with the run."""
        if self.records != "none":
            return self.requests[["policy", "latency_s"]]
        parts = []
        for policy, values in self.latency.items():
            ranked = np.sort(values)
            if points is not None and len(ranked) > points:
                ranked = ranked[np.unique(np.linspace(0, len(ranked) - 1, points).astype(int))]
            parts.append(pd.DataFrame({"policy": policy, "latency_s": ranked}))
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        return frame.astype({"policy": "string"}) if parts else frame

    @property
    def timeseries(self) -> pd.DataFrame:
        """Counts per `timeseries_bin_s` bin and policy (timeseries.parquet): the storm view.
        Needs the calls table (ValueError without: run with records "all")."""
        if self.records != ALL:
            raise ValueError(f"a run with records {self.records!r} kept no calls for timeseries")
        return timeseries(
            self.requests,
            self.calls,
            self.plan.timeseries_bin_s,
            bursts(self.plan.arrivals),
        )


@dataclass
class SweepResult:
    """Stacked tables of every point: the per-replication summary, the runs (for plots), and
    `aggregate`: one row per grid point and policy with confidence intervals."""

    points: list[SweepPoint]
    summary: pd.DataFrame
    requests: pd.DataFrame
    keys: list[str] = field(default_factory=list)
    #: The plan of the swept scenario (None: stacked without one).
    plan: Plan | None = None

    @property
    def aggregate(self) -> pd.DataFrame:
        """Replications pooled per grid point and policy (see docs/metrics.md)."""
        return aggregate_replications(self.summary, self.keys)
