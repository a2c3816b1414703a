"""One policy's share of a run: the job every policy shares, the context it rebuilds from the
seed (arrivals and draws), and the policy run on the engine that gives its numbers.

Apart from `sim.study.runner` (which checks the options, runs the pilot and stacks the
policies' outcomes into a RunResult) so that `sim.study.policy_pool` can run a policy in a
worker without importing the runner that imports it. Any process may call `run_policy`: each
rebuilds the same arrivals and draws (`RunJob.context`), so the tables are the same to the bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from sim.analysis.breakdown import provider_limits
from sim.analysis.capacity import ALL, REQUESTS, check_fits
from sim.analysis.metrics import calls_frame, requests_frame
from sim.analysis.user_signal import fill_user_first_token
from sim.engine.choice import DES, VECTORIZED, vectorized_in_chunks, vectorized_tables
from sim.engine.simulation import Simulation
from sim.engine.tally import PolicyTally, SettledRuns
from sim.engine.vector_tables import VectorTables
from sim.engine.vectorized import clock_arrivals
from sim.model.arrivals import arrival_times
from sim.model.rows import Records
from sim.model.streams import CallDrawBank, Streams, WindowedDrawBank
from sim.plan import Plan
from sim.policy.actions import actions_frame
from sim.policy.plans import Policy


@dataclass
class RunJob:
    """One run's work, small enough to send to a worker: the resolved plan (the pilot's
    thresholds travel in it; its seed, size and engine are the run's), the policies to run and
    the tables to keep. The draws are made again from the seed (`context`)."""

    plan: Plan
    names: list[str]
    records: str

    @property
    def n(self) -> int:
        """Requests of the run (the plan's)."""
        return self.plan.requests

    def context(self) -> _RunContext:
        """The arrivals and the (lazy) draw bank of this run: the same in every process."""
        plan = self.plan
        streams = Streams(plan.seed, "main")
        arrivals = arrival_times(plan.arrivals, plan.requests, streams.generator("arrivals"))
        bank = CallDrawBank(streams.child("calls"), plan.requests)
        return _RunContext(self, plan, streams, bank, arrivals)


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
    plan = context.plan
    policy = plan.runtime(name)
    if context.job.records != ALL:
        outcome = _tallied_policy(context, name, policy, progress, stop)
    else:
        bank, arrivals = context.bank, context.arrivals
        fast, note = vectorized_tables(plan, policy, bank, arrivals, plan.engine)
        if fast is not None:  # no controls: the vectorized engine never has a breaker
            outcome = PolicyOutcome(name, VECTORIZED, note, 0.0, requests=fast.requests,
                                    calls=fast.calls)  # fmt: skip
            if progress:
                progress(name, plan.requests)
            if stop is not None and stop():
                raise KeyboardInterrupt
        else:
            records_ = context.simulate(name, policy, progress, stop)
            calls = calls_frame(records_)
            requests = fill_user_first_token(requests_frame(records_), calls, plan.signal_step)
            outcome = PolicyOutcome(
                name, DES, note, records_.breaker_open_s, requests=requests, calls=calls,
                actions=actions_frame(records_),
            )  # fmt: skip
    outcome.wall_s = time.perf_counter() - began
    return outcome


@dataclass
class _RunContext:
    """What every policy of one run shares: the job, its plan, arrivals and draws."""

    job: RunJob
    plan: Plan
    streams: Streams
    bank: CallDrawBank
    arrivals: np.ndarray

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
        bank = self.bank
        if self.job.records != ALL:
            bank = WindowedDrawBank(self.streams.child("calls"), self.plan.requests)
        return Simulation(self.plan, policy, bank, self.streams)


def _tallied_policy(
    context: _RunContext,
    name: str,
    policy: Policy,
    progress: Callable[[str, int], None] | None,
    stop: Callable[[], bool] | None,
) -> PolicyOutcome:
    """One policy keeping only its tally (records none) or its requests table too (requests):
    vectorized, a chunk of requests at a time, so memory does not grow with calls."""
    plan, records = context.plan, context.job.records
    collector = _Collector(context, name, context.clocked, records, progress, stop)
    note = vectorized_in_chunks(
        plan, policy, context.streams.child("calls"), context.clocked, plan.engine, collector.feed
    )
    breaker_open = 0.0
    if note:  # the event engine, whole: start the tally again
        why = f"policy '{name}' needs the event engine ({note}): "
        check_fits(plan, plan.requests, [name], records=records, event_engine=True, why=why)
        if progress and collector.fed:
            progress(name, -collector.fed)  # its chunks are dropped: back to the start
        collector = _Collector(context, name, context.clocked, records, progress, stop)
        breaker_open = collector.simulate(policy)
    engine = DES if note else VECTORIZED
    return PolicyOutcome(name, engine, note, breaker_open, tally=collector.tally,
                         kept=collector.requests)  # fmt: skip


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
        plan = context.plan
        self.context, self.name, self.records = context, name, records
        self.progress, self.stop = progress, stop
        self.tally = PolicyTally(
            name,
            clocked,
            limits=provider_limits(plan.provider_specs),
            tpm=plan.tpm_quotas(),
            warmup_s=plan.warmup_s,
            first_signal_s=plan.first_signal_s,
            first_signal=plan.first_signal,
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


#: What every policy of one run shares (arrivals, draws), for the other runners of a policy
#: (`sim.harness.runner`: a user's handler in place of a scenario policy).
RunContext = _RunContext
