"""The library's front door: run every policy of a scenario on the same arrivals and draws.

`run(scenario)` resolves 'pNN' thresholds with a pilot run, then simulates each policy on common
random numbers (same arrivals, same per-call draws) and returns the summary, requests and calls
tables as DataFrames: the same tables `tailsim run` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sim.analysis.breakdown import breakdown, provider_limits
from sim.analysis.capacity import ALL, RECORDS, REQUESTS, check_fits, default_records
from sim.analysis.metrics import (
    CALL_COLUMNS,
    REQUEST_COLUMNS,
    calls_frame,
    requests_frame,
    summarize,
)
from sim.analysis.timeseries import timeseries
from sim.engine.choice import DES, VECTORIZED, vectorized_in_chunks, vectorized_tables
from sim.engine.simulation import Simulation, serving_latencies
from sim.engine.tally import PolicyTally, SettledRuns
from sim.engine.tally import breakdown_table as tally_breakdown
from sim.engine.tally import summary_table as tally_summary
from sim.engine.vector_tables import VectorTables
from sim.engine.vectorized import clock_arrivals
from sim.model.arrivals import arrival_times, bursts
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.rows import Records
from sim.model.streams import CallDrawBank, Streams, WindowedDrawBank
from sim.model.workflow import Workflow
from sim.policy.actions import actions_frame, no_actions
from sim.policy.build import build_resolved
from sim.policy.deadlines import admission_needs_pilot, resolve_expected, rules_for
from sim.policy.plans import Policy
from sim.study.pilot import needs_pilot, resolve_specs, step_latencies, thresholds_of, tool_steps

if TYPE_CHECKING:
    from matplotlib.figure import Figure


#: Ranks per policy a summaries-only run draws its latency ECDF with (finer than the pixels).
ECDF_FIGURE_POINTS = 20_000


@dataclass
class RunResult:
    """The tables of one run of a scenario, plus what is needed to reproduce it."""

    scenario: Scenario
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
        return breakdown(self.requests, self.calls, provider_limits(self.scenario.providers))

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

    def save(self, folder: str | Path, figures: bool = True) -> Path:
        """Write the run's result files to `folder` (as `tailsim run --out` does)."""
        from sim import __version__  # noqa: PLC0415
        from sim.output.results import write_results  # noqa: PLC0415 - files are not the engine's job

        return write_results(self, Path(folder), self.scenario.name, __version__, figures)

    def plot(self) -> Figure:
        """The run's comparison figure (latency against the deadline; the trade), for a notebook."""
        from sim.output.plots import policy_comparison  # noqa: PLC0415 - slow import, on demand

        return policy_comparison(
            self.summary,
            self.latency_table(ECDF_FIGURE_POINTS),
            self.scenario.deadline_s,
            self.scenario.name,
        )

    @property
    def timeseries(self) -> pd.DataFrame:
        """Counts per `timeseries_bin_s` bin and policy (timeseries.parquet): the storm view.
        Needs the calls table (ValueError without: run with records "all")."""
        if self.records != ALL:
            raise ValueError(f"a run with records {self.records!r} kept no calls for timeseries")
        return timeseries(
            self.requests,
            self.calls,
            self.scenario.timeseries_bin_s,
            bursts(self.scenario.arrivals),
        )


def chosen_policies(
    scenario: Scenario, policies: Sequence[str] | None, argument: str = "policies="
) -> list[str]:
    """The policies to run, each once, in the order given (all of the scenario's by default);
    an unknown name is reported against `argument` (the caller's spelling of the option)."""
    if isinstance(policies, str):
        policies = [policies]
    names = list(dict.fromkeys(policies)) if policies else list(scenario.policies)
    unknown = [p for p in names if p not in scenario.policies]
    if unknown:
        known = ", ".join(scenario.policies)
        raise ScenarioError(
            argument, [("", f"unknown policy {unknown[0]!r} in {scenario.name} (known: {known})")]
        )
    return names


def run(
    scenario: Scenario,
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
    """Simulate the chosen policies (all by default) and return their tables.

    `progress(policy, n)` is told each time `n` more requests of `policy` have arrived; `stop()`
    is asked now and then, and a yes ends the run with KeyboardInterrupt at a safe point.
    `engine` overrides the scenario's `engine:` (auto | des | vectorized). `records` says which
    tables to keep: all; requests (no calls table); none (summary, breakdown and latencies
    only, aggregated as the run goes, the vectorized engine a chunk of requests at a time, so
    memory does not grow with calls). Default: all, or none when all would not fit
    (`sim.analysis.capacity.default_records`). `executor` ('inline', 'processes' or 'dask', with
    `workers` and a dask `scheduler` as for `sim.study.sweep`) runs the policies side by side: each
    worker draws what this process would, so the tables are the same to the last bit.
    """
    n = scenario.requests if requests is None else requests
    if n < 1:
        raise ScenarioError(scenario.source, [("requests", f"must be >= 1, got {n}")])
    seed = scenario.seed if seed is None else seed
    names = chosen_policies(scenario, policies)
    if records is None:
        records = default_records(scenario, n, names)
    if records not in RECORDS:
        raise ScenarioError(scenario.source, [("records", f"got {records!r}, allowed: {RECORDS}")])
    if executor != "inline" or workers is not None or scheduler is not None:
        from sim.study.executors import check_executor  # noqa: PLC0415 - only when asked for

        check_executor(executor, workers, scheduler)
    check_fits(scenario, n, names, records=records)

    started = time.perf_counter()
    measured = None  # one pilot run for the thresholds and admission's expected times
    if needs_pilot(scenario) or admission_needs_pilot(scenario):
        measured = step_latencies(scenario, seed, first_token=True)
    specs = resolve_specs(scenario, seed, measured)
    thresholds = thresholds_of(specs, tool_steps(scenario))
    expected = resolve_expected(scenario, measured)
    wall = {"pilot": time.perf_counter() - started}

    plan = RunPlan(scenario, seed, n, names, specs, expected, records, engine or scenario.engine)
    if executor == "inline":
        context = plan.context()  # records all: one draw bank, each policy reuses the last's
        outcomes = [run_policy(context, name, progress, stop) for name in names]
    else:
        from sim.study.policy_pool import run_policies  # noqa: PLC0415 - executors on demand

        outcomes = run_policies(plan, executor, workers, scheduler, progress, stop)
    wall.update((o.name, o.wall_s) for o in outcomes)
    thresholds = {name: thresholds[name] for name in names}
    if records != ALL:
        result = _tallied_result(plan, thresholds, wall, outcomes)
    else:
        result = _tables_result(plan, thresholds, wall, outcomes)
    result.executor, result.workers = executor, workers
    return result


@dataclass
class RunPlan:
    """Everything one policy's share of a run depends on, small enough to send to a worker:
    the pilot's results travel, the draws are made again from the seed (`context`)."""

    scenario: Scenario
    seed: int
    n: int
    names: list[str]
    specs: dict
    expected: dict
    records: str
    engine: str

    def context(self) -> _RunContext:
        """The arrivals and the (lazy) draw bank of this run: the same in every process."""
        streams = Streams(self.seed, "main")
        arrivals = arrival_times(self.scenario.arrivals, self.n, streams.generator("arrivals"))
        bank = CallDrawBank(streams.child("calls"), self.n)
        return _RunContext(
            self, self.scenario, self.names, self.specs, streams, bank, arrivals,
            serving_latencies(self.scenario), self.expected,
            Workflow.from_scenario(self.scenario).steps,
        )  # fmt: skip


@dataclass
class PolicyOutcome:
    """One policy's share of a run, as `run` stacks it: its tables (records all), or its tally
    and kept requests (the other records), and which engine ran it."""

    name: str
    engine: str
    note: str
    breaker_open_s: float
    wall_s: float = 0.0
    requests: pd.DataFrame | None = None
    calls: pd.DataFrame | None = None
    #: Tool steps' action records (event engine only).
    actions: pd.DataFrame | None = None
    tally: PolicyTally | None = None
    #: Records "requests": the requests table, a chunk at a time.
    kept: list[pd.DataFrame] = field(default_factory=list)


def run_policy(
    context: _RunContext,
    name: str,
    progress: Callable[[str, int], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> PolicyOutcome:
    """Policy `name` of the run, on the engine that gives its numbers (any process may)."""
    began = time.perf_counter()
    scenario = context.scenario
    policy = build_resolved(name, context.specs[name], scenario, context.steps)
    if context.plan.records != ALL:
        outcome = _tallied_policy(context, name, policy, progress, stop)
    else:
        bank, arrivals, engine = context.bank, context.arrivals, context.plan.engine
        fast, note = vectorized_tables(scenario, policy, bank, arrivals, engine, context.latencies)
        if fast is not None:  # no controls: the vectorized engine never has a breaker
            outcome = PolicyOutcome(name, VECTORIZED, note, 0.0, requests=fast.requests,
                                    calls=fast.calls)  # fmt: skip
            if progress:
                progress(name, context.plan.n)
            if stop is not None and stop():
                raise KeyboardInterrupt
        else:
            records_ = context.simulate(name, policy, progress, stop)
            outcome = PolicyOutcome(
                name, DES, note, records_.breaker_open_s, requests=requests_frame(records_),
                calls=calls_frame(records_), actions=actions_frame(records_),
            )  # fmt: skip
    outcome.wall_s = time.perf_counter() - began
    return outcome


def _tables_result(
    plan: RunPlan,
    thresholds: dict[str, dict[str, float]],
    wall: dict[str, float],
    outcomes: list[PolicyOutcome],
) -> RunResult:
    """The RunResult of a run that kept every table: the policies' tables stacked in order."""
    scenario = plan.scenario
    requests_table = pd.concat([o.requests for o in outcomes], ignore_index=True)
    calls_table = pd.concat([o.calls for o in outcomes], ignore_index=True)
    action_tables = [o.actions for o in outcomes if o.actions is not None]
    actions_table = pd.concat(action_tables, ignore_index=True) if action_tables else no_actions()
    counted_requests, counted_calls = after_warmup(requests_table, calls_table, scenario.warmup_s)
    counted_actions = _kept(actions_table, counted_requests)
    return RunResult(
        scenario=scenario,
        seed=plan.seed,
        requests_count=plan.n,
        thresholds=thresholds,
        summary=summarize(
            counted_requests,
            counted_calls,
            {m: spec.quality for m, spec in scenario.models.items()},
            tpm=tpm_quotas(scenario),
            breaker_open={o.name: o.breaker_open_s for o in outcomes},
            actions=counted_actions,
            first_signal_s=scenario.first_signal_s,
        ),
        requests=requests_table,
        calls=calls_table,
        wall_s=wall,
        engines={o.name: o.engine for o in outcomes},
        engine_notes={o.name: o.note for o in outcomes},
        actions=actions_table,
    )


@dataclass
class _RunContext:
    """What every policy of one run shares: the scenario, resolved specs, arrivals and draws."""

    plan: RunPlan
    scenario: Scenario
    names: list[str]
    specs: dict
    streams: Streams
    bank: CallDrawBank
    arrivals: np.ndarray
    latencies: dict
    expected: dict
    steps: list

    @cached_property
    def clocked(self) -> np.ndarray:
        """The arrivals as the simulation clock sees them (the tallies' first sends)."""
        return clock_arrivals(np.asarray(self.arrivals, dtype=float))

    def simulate(
        self,
        name: str,
        policy: Policy,
        progress: Callable[[str, int], None] | None,
        stop: Callable[[], bool] | None,
    ) -> Records:
        """Policy `name` on the event engine, with its deadline rules."""
        tick = (lambda k, _name=name: progress(_name, k)) if progress else None
        return self.simulation(name, policy).run(self.arrivals, tick, stop)

    def simulation(self, name: str, policy: Policy) -> Simulation:
        """A fresh event-engine simulation of policy `name`, with its deadline rules. Records
        all: on the run's shared bank. Otherwise on a windowed bank of its own (blocks near the
        requests in flight): that bank is for one pass over the requests in order, and shared, a
        second policy's first blocks would count as stale and be drawn again on every use."""
        rules = rules_for(self.scenario, name, self.expected[name])
        bank = self.bank
        if self.plan.records != ALL:
            bank = WindowedDrawBank(self.streams.child("calls"), self.plan.n)
        return Simulation(
            self.scenario, policy, bank, self.streams, latencies=self.latencies, rules=rules
        )


def _tallied_policy(
    context: _RunContext,
    name: str,
    policy: Policy,
    progress: Callable[[str, int], None] | None,
    stop: Callable[[], bool] | None,
) -> PolicyOutcome:
    """One policy keeping only its tally (records none) or its requests table too (requests):
    vectorized, a chunk of requests at a time, so memory does not grow with calls."""
    scenario, records = context.scenario, context.plan.records
    collector = _Collector(context, name, context.clocked, records, progress, stop)
    note = vectorized_in_chunks(
        scenario, policy, context.streams.child("calls"), context.clocked, context.plan.engine,
        collector.feed, context.latencies,
    )  # fmt: skip
    breaker_open = 0.0
    if note:  # the event engine, whole: start the tally again
        why = f"policy '{name}' needs the event engine ({note}): "
        check_fits(scenario, context.plan.n, [name], records=records, event_engine=True, why=why)
        if progress and collector.fed:
            progress(name, -collector.fed)  # its chunks are dropped: back to the start
        collector = _Collector(context, name, context.clocked, records, progress, stop)
        breaker_open = collector.simulate(policy)
    engine = DES if note else VECTORIZED
    return PolicyOutcome(name, engine, note, breaker_open, tally=collector.tally,
                         kept=collector.requests)  # fmt: skip


def _tallied_result(
    plan: RunPlan,
    thresholds: dict[str, dict[str, float]],
    wall: dict[str, float],
    outcomes: list[PolicyOutcome],
) -> RunResult:
    """The RunResult of a run that kept summaries only (or the requests table too)."""
    scenario = plan.scenario
    tallies = [o.tally for o in outcomes if o.tally is not None]
    if any(not t.sums.get("runs") for t in tallies):
        raise ScenarioError(
            "warmup_s", [("", f"{scenario.warmup_s:g} s leaves no request to count: lower it")]
        )
    kept = [part for o in outcomes for part in o.kept]
    requests_table = (
        pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=list(REQUEST_COLUMNS))
    )
    return RunResult(
        scenario=scenario,
        seed=plan.seed,
        requests_count=plan.n,
        thresholds=thresholds,
        summary=tally_summary(tallies, {o.name: o.breaker_open_s for o in outcomes}),
        requests=requests_table,
        calls=pd.DataFrame(columns=list(CALL_COLUMNS)),
        wall_s=wall,
        engines={o.name: o.engine for o in outcomes},
        engine_notes={o.name: o.note for o in outcomes},
        records=plan.records,
        latency={t.policy: t.latencies() for t in tallies},
        breakdown_table=tally_breakdown(tallies),
    )


class _Collector:
    """One policy's tally (and requests table, if kept) as its chunks of tables come in."""

    def __init__(
        self,
        context: _RunContext,
        name: str,
        clocked: np.ndarray,
        records: str,
        progress: Callable[[str, int], None] | None,
        stop: Callable[[], bool] | None,
    ) -> None:
        scenario = context.scenario
        self.context, self.name, self.records = context, name, records
        self.progress, self.stop = progress, stop
        self.tally = PolicyTally(
            name,
            clocked,
            limits=provider_limits(scenario.providers),
            tpm=tpm_quotas(scenario),
            warmup_s=scenario.warmup_s,
            first_signal_s=scenario.first_signal_s,
        )
        self.requests: list[pd.DataFrame] = []
        self.fed = 0  # requests of vectorized chunks tallied

    def feed(self, part: VectorTables, horizon: float) -> None:
        """A vectorized chunk: tally it, keep its requests if asked, report progress."""
        self.tally.add(part.requests, part.calls, None, horizon)
        self.fed += len(part.requests)
        if self.records == REQUESTS:
            self.requests.append(part.requests)
        if self.progress:
            self.progress(self.name, len(part.requests))
        if self.stop is not None and self.stop():
            raise KeyboardInterrupt

    def simulate(self, policy: Policy) -> float:
        """The whole policy on the event engine, its settled runs tallied as it goes (see
        `SettledRuns`); returns its breakers' open seconds."""
        context, name = self.context, self.name
        if isinstance(context.bank, WindowedDrawBank):
            context.bank.rewind()  # this policy's pass starts again from the first request
        sim = context.simulation(name, policy)
        keep = self.requests if self.records == REQUESTS else None
        settled = SettledRuns(sim, self.tally, keep)
        progress = self.progress

        def tick(k: int) -> None:
            if progress is not None:
                progress(name, k)
            settled.check()

        done = sim.run(context.arrivals, tick, self.stop)
        settled.finish(done)
        return done.breaker_open_s


def _kept(actions: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """The actions of the requests the statistics count (see `after_warmup`)."""
    if actions.empty:
        return actions
    index = pd.MultiIndex.from_frame(requests[["policy", "request_id"]].drop_duplicates())
    keep = pd.MultiIndex.from_frame(actions[["policy", "request_id"]]).isin(index)
    return actions[keep].reset_index(drop=True)


def tpm_quotas(scenario: Scenario) -> dict[tuple[str, str | None], int]:
    """Every TPM quota of the scenario: (provider, None) for a provider's, (provider, model) for
    a model's own."""
    quotas: dict[tuple[str, str | None], int] = {}
    for name, spec in scenario.providers.items():
        if spec.tpm:
            quotas[(name, None)] = spec.tpm
        for model, serving in spec.serves.items():
            if serving.tpm:
                quotas[(name, model)] = serving.tpm
    return quotas


def after_warmup(
    requests: pd.DataFrame, calls: pd.DataFrame, warmup_s: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows the statistics use: requests whose first send arrived at or after `warmup_s`
    (with all their re-sends) and their calls. Earlier requests ran, loading providers and
    quotas, but are left out, so steady-state figures can be read."""
    if warmup_s <= 0:
        return requests, calls
    first = requests.loc[requests["resend"] == 0, ["policy", "request_id", "arrival_s"]]
    kept = first.loc[first["arrival_s"] >= warmup_s, ["policy", "request_id"]]
    if kept.empty:
        raise ScenarioError(
            "warmup_s", [("", f"{warmup_s:g} s leaves no request to count: lower it")]
        )
    index = pd.MultiIndex.from_frame(kept)
    keep_requests = pd.MultiIndex.from_frame(requests[["policy", "request_id"]]).isin(index)
    keep_calls = pd.MultiIndex.from_frame(calls[["policy", "request_id"]]).isin(index)
    return (
        requests[keep_requests].reset_index(drop=True),
        calls[keep_calls].reset_index(drop=True),
    )
