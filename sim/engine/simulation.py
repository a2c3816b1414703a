"""The event engine: one policy on one scenario, in its own simpy Environment.

`Simulation` builds a fresh environment (`sim.engine.kernel.Environment`) and providers,
replays the given arrivals, runs every request's workflow under the policy, holds each request
to its end-to-end deadline (cancelling its in-flight calls when it passes) and returns flat
records. It knows nothing of files, plots or the CLI. Its work is done by three parts, each an
object given the state it uses: a request's bookkeeping (`sim.engine.event_runs.RunBook`:
arrivals, a run's start, deadline, hang-up, end and re-send), a step's run
(`sim.engine.event_steps.StepRunner` and the policy's `StepHandle`: dispatch to the policy or
the tool desk, resolving what a step unlocks) and a call's life (`sim.engine.event_calls.
CallMaker`: the controls' gate, draws, the provider call, checks, SDK retries, the records).
This module ties them: it builds them in order (calls, steps, runs: each part knows only those
below it, and the book hands its `finish` to the steps with each run), runs the loop under its
garbage-collector settings, and builds the providers.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from sim.engine.event_calls import CallMaker
from sim.engine.event_flow import flow_step
from sim.engine.event_runs import RunBook
from sim.engine.event_steps import StepRunner
from sim.engine.kernel import Environment
from sim.engine.provider import Provider, Serving
from sim.model.rows import Action, Call, Records, Run
from sim.model.streams import CallDrawBank, Streams
from sim.plan import Plan
from sim.policy.controls import Controls
from sim.policy.deadlines import DeadlineRules
from sim.policy.plans import Policy

#: Cyclic-GC thresholds while a simulation runs (at least these; restored after).
GC_THRESHOLDS = (100_000, 50, 50)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the cyclic garbage collector's thresholds for the duration: a run allocates
    millions of short-lived objects while its records (kept alive on purpose) grow, so at the
    default thresholds the collector keeps re-scanning the records; finished runs are freed by
    reference counting, so collecting less often does not let memory grow."""
    old = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(old, GC_THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*old)


class Simulation:
    """One policy of a plan, in its own simpy Environment."""

    def __init__(
        self,
        plan: Plan,
        policy: Policy,
        bank: CallDrawBank,
        streams: Streams,
        deadline_s: float | None = None,
        rules: DeadlineRules | None = None,
    ) -> None:
        self.env = env = Environment()
        self.plan = plan
        self.policy = policy
        self.bank = bank
        self.streams = streams
        self.workflow = plan.workflow
        self.deadline_s = plan.deadline_s if deadline_s is None else deadline_s
        self.providers = build_providers(env, plan, streams)
        #: How the deadline reaches this policy's work (propagation, reserve, admission): the
        #: plan's rules of the policy (the defaults for a name it does not have).
        if rules is None:
            known = plan.policies.get(policy.name)
            rules = known.rules if known is not None else DeadlineRules(True, plan.reserve_s)
        self.rules = rules
        #: The policy's load-aware controls (None: off, and the plain call path is used).
        self.controls: Controls | None = None
        if policy.controls is not None:
            self.controls = Controls(env, policy.controls, list(self.providers), plan.workflow)
        controls = self.controls
        #: The parts, each given what it uses (none refers back to this object: no cycle).
        self.maker = CallMaker(
            env, plan, bank, streams, self.providers, controls, policy.watches_flights
        )
        attempt = self.maker.attempt if controls is None else self.maker.controlled
        self.steps = StepRunner(
            env, plan, policy, bank, rules, controls, attempt, self.deadline_s, flow_step
        )
        self.book = RunBook(env, plan, bank, streams, self.deadline_s, rules, controls, self.steps)
        #: The records, filled by the parts (the streaming tally trims them in place).
        self.runs: list[Run] = self.book.runs
        self.calls: list[Call] = self.maker.calls
        self.actions: list[Action] = self.steps.actions

    def run(
        self,
        arrivals: np.ndarray,
        progress: Callable[[int], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Records:
        """Replay `arrivals` (seconds) to the end and return the records.

        `stop` is asked every few thousand events; when it says yes the run ends with
        KeyboardInterrupt between two events, never inside simpy's own bookkeeping."""
        self.env.process(self.book.arrivals(arrivals, progress))
        with fewer_collections():
            if stop is None:
                self.env.run()
            else:
                self.env.run_checking(stop)
        open_s = self.controls.breaker_open_s(self.env.now) if self.controls is not None else 0.0
        return Records(self.policy.name, self.runs, self.calls, open_s, self.actions)


def build_providers(env: Environment, plan: Plan, streams: Streams) -> dict[str, Provider]:
    """Every provider of the plan in `env`, each serving its models on their latency laws and
    prices (an episodes stream of its own where it has episodes)."""
    return {
        name: Provider(
            env,
            name,
            provider.spec,
            {
                model: Serving(serving.latency, serving.price_input, serving.price_output)
                for model, serving in provider.servings.items()
            },
            plan.billing,
            streams.generator("episodes", name) if provider.spec.episodes is not None else None,
        )
        for name, provider in plan.providers.items()
    }
