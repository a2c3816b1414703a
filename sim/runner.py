"""The library's front door: run every policy of a scenario on the same arrivals and draws.

`run(scenario)` resolves 'pNN' thresholds with a pilot run, then simulates each policy on common
random numbers (same arrivals, same per-call draws) and returns the summary, requests and calls
tables as DataFrames: the same tables `tailsim run` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from sim.arrivals import arrival_times
from sim.breakdown import breakdown, provider_limits
from sim.capacity import check_fits
from sim.config import Scenario
from sim.engine import Simulation, serving_latencies
from sim.engine_choice import DES, VECTORIZED, vectorized_tables
from sim.errors import ScenarioError
from sim.metrics import calls_frame, requests_frame, summarize
from sim.pilot import resolve_thresholds
from sim.policies import build_policy
from sim.streams import CallDrawBank, Streams
from sim.workflow import Workflow


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

    @property
    def breakdown(self) -> pd.DataFrame:
        """Why each policy did as it did: failures by reason and step, load per provider."""
        return breakdown(self.requests, self.calls, provider_limits(self.scenario.providers))


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
    engine: str | None = None,
) -> RunResult:
    """Simulate the chosen policies (all by default) and return their tables.

    `progress(policy, n)` is told each time `n` more requests of `policy` have arrived.
    `engine` overrides the scenario's `engine:` (auto | des | vectorized).
    """
    n = scenario.requests if requests is None else requests
    if n < 1:
        raise ScenarioError(scenario.name, [("requests", f"must be >= 1, got {n}")])
    seed = scenario.seed if seed is None else seed
    names = chosen_policies(scenario, policies)
    check_fits(scenario, n, names)

    started = time.perf_counter()
    thresholds = resolve_thresholds(scenario, seed)
    wall = {"pilot": time.perf_counter() - started}

    streams = Streams(seed, "main")
    arrivals = arrival_times(scenario.arrivals, n, streams.generator("arrivals"))
    bank = CallDrawBank(streams.child("calls"), n)
    latencies = serving_latencies(scenario)
    steps = Workflow.from_scenario(scenario).steps
    request_tables, call_tables = [], []
    engines, notes = {}, {}
    for name in names:
        began = time.perf_counter()
        policy = build_policy(name, scenario.policies[name], scenario, steps, thresholds[name])
        fast, notes[name] = vectorized_tables(
            scenario, policy, bank, arrivals, engine or scenario.engine, latencies
        )
        engines[name] = DES if fast is None else VECTORIZED
        if fast is not None:
            request_tables.append(fast.requests)
            call_tables.append(fast.calls)
            if progress:
                progress(name, n)
        else:
            sim = Simulation(scenario, policy, bank, streams, latencies=latencies)
            tick = (lambda k, _name=name: progress(_name, k)) if progress else None
            records = sim.run(arrivals, tick)
            request_tables.append(requests_frame(records))
            call_tables.append(calls_frame(records))
        wall[name] = time.perf_counter() - began
    requests_table = pd.concat(request_tables, ignore_index=True)
    calls_table = pd.concat(call_tables, ignore_index=True)
    return RunResult(
        scenario=scenario,
        seed=seed,
        requests_count=n,
        thresholds={name: thresholds[name] for name in names},
        summary=summarize(
            requests_table, calls_table, {m: spec.quality for m, spec in scenario.models.items()}
        ),
        requests=requests_table,
        calls=calls_table,
        wall_s=wall,
        engines=engines,
        engine_notes=notes,
    )
