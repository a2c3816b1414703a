"""The library's front door: run every policy of a scenario on the same arrivals and draws.

`run(scenario)` resolves 'pNN' thresholds with a pilot run, then simulates each policy on common
random numbers (same arrivals, same per-call draws) and returns the summary, requests and calls
tables as DataFrames: the same tables `tailsim run` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from sim.actions import actions_frame, no_actions
from sim.arrivals import arrival_times, bursts
from sim.breakdown import breakdown, provider_limits
from sim.capacity import check_fits
from sim.config import Scenario
from sim.deadlines import admission_needs_pilot, resolve_expected, rules_for
from sim.engine import Simulation, serving_latencies
from sim.engine_choice import DES, VECTORIZED, vectorized_tables
from sim.errors import ScenarioError
from sim.metrics import calls_frame, requests_frame, summarize
from sim.pilot import needs_pilot, resolve_specs, step_latencies, thresholds_of
from sim.policies import build_resolved
from sim.streams import CallDrawBank, Streams
from sim.timeseries import timeseries
from sim.workflow import Workflow

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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

    @property
    def breakdown(self) -> pd.DataFrame:
        """Why each policy did as it did: failures by reason and step, load per provider."""
        return breakdown(self.requests, self.calls, provider_limits(self.scenario.providers))

    def save(self, folder: str | Path, figures: bool = True) -> Path:
        """Write the run's result files to `folder` (as `tailsim run --out` does)."""
        from sim import __version__  # noqa: PLC0415
        from sim.results import write_results  # noqa: PLC0415 - files are not the engine's job

        return write_results(self, Path(folder), self.scenario.name, __version__, figures)

    def plot(self) -> Figure:
        """The run's comparison figure (latency against the deadline; the trade), for a notebook."""
        from sim.plots import policy_comparison  # noqa: PLC0415 - slow import, on demand

        return policy_comparison(
            self.summary, self.requests, self.scenario.deadline_s, self.scenario.name
        )

    @property
    def timeseries(self) -> pd.DataFrame:
        """Counts per `timeseries_bin_s` bin and policy (timeseries.parquet): the storm view."""
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
) -> RunResult:
    """Simulate the chosen policies (all by default) and return their tables.

    `progress(policy, n)` is told each time `n` more requests of `policy` have arrived; `stop()`
    is asked now and then, and a yes ends the run with KeyboardInterrupt at a safe point.
    `engine` overrides the scenario's `engine:` (auto | des | vectorized).
    """
    n = scenario.requests if requests is None else requests
    if n < 1:
        raise ScenarioError(scenario.name, [("requests", f"must be >= 1, got {n}")])
    seed = scenario.seed if seed is None else seed
    names = chosen_policies(scenario, policies)
    check_fits(scenario, n, names)

    started = time.perf_counter()
    measured = None  # one pilot run for the thresholds and admission's expected times
    if needs_pilot(scenario) or admission_needs_pilot(scenario):
        measured = step_latencies(scenario, seed, first_token=True)
    specs = resolve_specs(scenario, seed, measured)
    thresholds = thresholds_of(specs)
    expected = resolve_expected(scenario, measured)
    wall = {"pilot": time.perf_counter() - started}

    streams = Streams(seed, "main")
    arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    latencies = serving_latencies(scenario)
    steps = Workflow.from_scenario(scenario).steps
    request_tables, call_tables, action_tables = [], [], []
    engines, notes = {}, {}
    breaker_open: dict[str, float] = {}
    for name in names:
        began = time.perf_counter()
        policy = build_resolved(name, specs[name], scenario, steps)
        fast, notes[name] = vectorized_tables(
            scenario, policy, bank, arrivals, engine or scenario.engine, latencies
        )
        engines[name] = DES if fast is None else VECTORIZED
        if fast is not None:
            breaker_open[name] = 0.0  # no controls: the vectorized engine never has a breaker
            request_tables.append(fast.requests)
            call_tables.append(fast.calls)
            if progress:
                progress(name, n)
            if stop is not None and stop():
                raise KeyboardInterrupt
        else:
            rules = rules_for(scenario, name, expected[name])
            sim = Simulation(scenario, policy, bank, streams, latencies=latencies, rules=rules)
            tick = (lambda k, _name=name: progress(_name, k)) if progress else None
            records = sim.run(arrivals, tick, stop)
            breaker_open[name] = records.breaker_open_s
            request_tables.append(requests_frame(records))
            call_tables.append(calls_frame(records))
            action_tables.append(actions_frame(records))
        wall[name] = time.perf_counter() - began
    requests_table = pd.concat(request_tables, ignore_index=True)
    calls_table = pd.concat(call_tables, ignore_index=True)
    actions_table = pd.concat(action_tables, ignore_index=True) if action_tables else no_actions()
    counted_requests, counted_calls = after_warmup(requests_table, calls_table, scenario.warmup_s)
    counted_actions = _kept(actions_table, counted_requests)
    return RunResult(
        scenario=scenario,
        seed=seed,
        requests_count=n,
        thresholds={name: thresholds[name] for name in names},
        summary=summarize(
            counted_requests,
            counted_calls,
            {m: spec.quality for m, spec in scenario.models.items()},
            tpm=tpm_quotas(scenario),
            breaker_open=breaker_open,
            actions=counted_actions,
            first_signal_s=scenario.first_signal_s,
        ),
        requests=requests_table,
        calls=calls_table,
        wall_s=wall,
        engines=engines,
        engine_notes=notes,
        actions=actions_table,
    )


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
