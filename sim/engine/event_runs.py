"""The event engine's bookkeeping of a request: its arrival, its deadline and its caller.

`RunBook` owns a request's run as a whole: arrivals replayed on the clock, a run started (its
root steps, its deadline timer, its caller's hang-up), the edge giving up on it (deadline,
disconnect), its end (every call still in flight cancelled, its quality settled) and a
customer's re-send of a failed request. It starts a run's steps through the step runner it is
given (`sim.engine.event_steps.StepRunner.walk`), handing it `finish` to end the run with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from sim.engine.event_steps import StepRunner, cancel
from sim.engine.kernel import Environment
from sim.model.backoff import retry_wait
from sim.model.latency import build_distribution
from sim.model.rows import FAIL_DEADLINE, FAIL_DISCONNECT, Run
from sim.model.streams import CallDrawBank, Streams
from sim.plan import Plan
from sim.policy.controls import FAIL_SHED, Controls
from sim.policy.deadlines import BY_RUN, DeadlineRules


class RunBook:
    """A request's bookkeeping in the event engine: every run, from arrival to end."""

    def __init__(
        self,
        env: Environment,
        plan: Plan,
        bank: CallDrawBank,
        streams: Streams,
        deadline_s: float,
        rules: DeadlineRules,
        controls: Controls | None,
        steps: StepRunner,
    ) -> None:
        self.env = env
        self.plan = plan
        self.bank = bank
        self.streams = streams
        self.workflow = plan.workflow
        self.deadline_s = deadline_s
        self.rules = rules
        self.controls = controls
        #: Runs a run's steps (given `finish` with each run: it keeps no reference back here).
        self.steps = steps
        #: Every run, in the order they started (re-sends included): the records.
        self.runs: list[Run] = []
        disconnect = plan.customers.disconnect
        self._disconnect_p = disconnect.probability if disconnect is not None else 0.0
        self._disconnect_after = (
            build_distribution(disconnect.after_s) if disconnect is not None else None
        )
        self.quality_floor = plan.quality_floor
        retry = plan.customers.retry
        self._resend_probability = retry.probability if retry.max > 0 else 0.0
        self._resend_uniforms: dict[int, np.ndarray] = {}

    def arrivals(
        self, times: np.ndarray, progress: Callable[[int], None] | None
    ) -> Generator[simpy.Event, Any, None]:
        """Replay the arrival `times` (seconds) on the clock, starting a run at each; `progress`
        is told every thousand requests."""
        env = self.env
        for index, at in enumerate(times.tolist()):
            if at > env.now:
                yield env.timeout(at - env.now)
            self._start_run(index, 0)
            if progress is not None and index % 1000 == 999:
                progress(1000)
        if progress is not None and len(times) % 1000:
            progress(len(times) % 1000)

    def _start_run(self, index: int, resend: int) -> None:
        """A run arrives: its root steps start, and its deadline is set (a plain timer)."""
        env = self.env
        run = Run(env, self.workflow, index, resend, self.deadline_s)
        self.runs.append(run)
        if self.controls is not None and not self.controls.admits_run(self.deadline_s):
            run.fail_reason = FAIL_SHED  # shed at arrival: expected past its deadline
            self.finish(run, False, env.now)
            return
        walk, finish = self.steps.walk, self.finish
        for step in self.workflow.roots:
            env.process(walk(run, step, finish))
        if math.isfinite(self.deadline_s):
            env.timeout(self.deadline_s).callbacks.append(lambda _: self._deadline_passed(run))
        if self._disconnect_p > 0:
            self._schedule_disconnect(run)

    def _deadline_passed(self, run: Run) -> None:
        if math.isnan(run.end):  # still going (or too late to deliver): the run has failed
            self._give_up(run, FAIL_DEADLINE, run.deadline_at)

    def _schedule_disconnect(self, run: Run) -> None:
        """With `customers.disconnect`, this run's caller may hang up (named streams)."""
        assert self._disconnect_after is not None
        if self.bank.uniform(run.index, "disconnect", run.resend) >= self._disconnect_p:
            return
        u = self.bank.uniform(run.index, "disconnect-after", run.resend)
        after = float(self._disconnect_after.from_uniform(np.asarray([u]))[0])

        def hang_up(_: simpy.Event) -> None:
            if math.isnan(run.end):
                self._give_up(run, FAIL_DISCONNECT, self.env.now)

        self.env.timeout(after).callbacks.append(hang_up)

    def _give_up(self, run: Run, reason: str, end: float) -> None:
        """The edge gives up on a run (deadline, disconnect): it has failed. With propagation
        its work stops now; without, nothing below the edge knows and the work runs on."""
        run.fail_reason, run.fail_step = reason, run.running
        run.given_up_at = self.env.now
        if self.rules.propagate:
            self.finish(run, False, end, reason)
            return
        run.edge_done = True
        run.ok, run.end = False, end
        if reason == FAIL_DEADLINE and self._resend_probability > 0:
            self._maybe_resend(run)

    def finish(self, run: Run, ok: bool, end: float, cause: str = BY_RUN) -> None:
        """End a run: nothing new starts, every call still in flight is cancelled now (`cause`
        becomes their `ended_by`). A run the edge already gave up on keeps that outcome."""
        run.closed = True
        if run.edge_done:
            for process in list(run.active):
                cancel(run, process, cause)
            return
        run.ok = ok
        run.end = end
        if ok:
            steps = self.workflow.steps
            run.valid = all(run.valid_steps[s.index] for s in steps if s.required)
            mean = run.quality_sum / run.answered if run.answered else 1.0
            run.quality = mean if run.valid else 0.0
            run.valid_hit = run.valid and run.quality >= self.quality_floor - 1e-12
        for process in list(run.active):
            cancel(run, process, cause)
        if not ok and self._resend_probability > 0 and run.fail_reason != FAIL_DISCONNECT:
            self._maybe_resend(run)

    def _maybe_resend(self, run: Run) -> None:
        """A customer re-sends a failed request whole, after a delay, with some probability."""
        retry = self.plan.customers.retry
        if run.resend >= retry.max:
            return
        u = self._resend_uniforms.get(run.resend)
        if u is None:
            rng = self.streams.generator("customer-resend", run.resend)
            u = rng.random(self.bank.n_requests)
            self._resend_uniforms[run.resend] = u
        if u[run.index] < retry.probability:
            index, resend = run.index, run.resend + 1
            delay = retry.delay_s
            if retry.backoff is not None:
                jitter = self.bank.uniform(index, "customer-backoff", resend)
                delay = retry_wait(retry.backoff, resend, jitter)
            self.env.timeout(delay).callbacks.append(lambda _: self._start_run(index, resend))
