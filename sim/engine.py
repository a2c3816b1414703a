"""The simulation of one policy on one scenario: arrivals, requests, steps, calls, deadline.

`simulate` builds a fresh simpy Environment and providers, replays the given arrivals, runs every
request's workflow under the policy, holds each request to its end-to-end deadline (cancelling
its in-flight calls when it passes) and returns flat records. It knows nothing of files, plots
or the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from sim.actions import Action, ToolDesk
from sim.backoff import retry_wait
from sim.conditions import difficulty_factors
from sim.config import Scenario
from sim.deadlines import (
    BY_ADMISSION,
    BY_ATTEMPT,
    BY_LOSER,
    BY_RUN,
    DeadlineRules,
    admits,
    attempt_limit,
    rules_for,
)
from sim.latency import CallLatency, build_distribution
from sim.policies import Attempt, Policy
from sim.provider import (
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    Call,
    Provider,
    Serving,
)
from sim.streams import CallDrawBank, Streams
from sim.workflow import Step, Workflow

#: Cause given to `Process.interrupt` when a call is cancelled.
CANCEL = OUTCOME_CANCELLED
#: `Run.remaining` value of a step that can no longer run (a step it needs failed).
LOST = -1
#: `fail_reason` of a run still going at its deadline.
FAIL_DEADLINE = "deadline"
#: `fail_reason` of a step that failed without making a call (its request closed first).
FAIL_NO_CALL = "no_call"
#: `fail_reason` of a run whose caller disconnected (`customers.disconnect`).
FAIL_DISCONNECT = "disconnect"
#: `fail_reason` of a step whose only attempt was refused: the time left could not fund it.
FAIL_REFUSED = "refused"


class Run:
    """One send of one customer request through the workflow (re-sends are new runs)."""

    __slots__ = (
        "active",
        "arrival",
        "calls",
        "closed",
        "cost",
        "deadline_at",
        "edge_done",
        "end",
        "fail_reason",
        "fail_step",
        "failed",
        "first_signal",
        "given_up_at",
        "index",
        "ok",
        "refused_retries",
        "refused_starts",
        "remaining",
        "resend",
        "running",
        "tokens",
        "unresolved",
    )

    def __init__(
        self, env: simpy.Environment, workflow: Workflow, index: int, resend: int, deadline_s: float
    ) -> None:
        self.index = index
        self.resend = resend
        self.arrival = env.now
        self.deadline_at = env.now + deadline_s
        self.closed = False
        self.ok = False
        self.failed = False
        self.end = math.nan
        self.fail_reason = ""  # deadline, or the outcome of the failing step's last call
        self.fail_step = ""  # the step that failed the run (at the deadline: one still running)
        self.running = ""  # the step started last (what the deadline interrupts)
        self.cost = 0.0
        self.tokens = 0
        self.calls = 0
        self.active: set[simpy.Process] = set()
        self.edge_done = False  # the edge answered (failed) while its work runs on (orphan)
        self.given_up_at = math.inf  # when the edge gave up (deadline, disconnect)
        self.first_signal = math.nan  # arrival to the first token of a first step's answer
        self.refused_retries = 0  # attempts after a step's first refused for lack of time
        self.refused_starts = 0  # steps' first attempts refused for lack of time
        self.remaining = [len(s.depends_on) for s in workflow.steps]
        self.unresolved = len(workflow.steps)


@dataclass
class Records:
    """What one simulation produced: every run and every call, as objects (tables come later)."""

    policy: str
    runs: list[Run]
    calls: list[Call]
    actions: list[Action] = field(default_factory=list)


class Simulation:
    """One policy on one scenario, in its own simpy Environment."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        bank: CallDrawBank,
        streams: Streams,
        deadline_s: float | None = None,
        latencies: dict[tuple[str, str], CallLatency] | None = None,
        rules: DeadlineRules | None = None,
    ) -> None:
        self.env = simpy.Environment()
        self.scenario = scenario
        self.policy = policy
        self.bank = bank
        self.streams = streams
        self.deadline_s = scenario.deadline_s if deadline_s is None else deadline_s
        self.workflow = Workflow.from_scenario(scenario)
        self.latencies = latencies or serving_latencies(scenario)
        self.providers = {
            name: Provider(
                self.env,
                name,
                spec,
                {
                    model: Serving(
                        self.latencies[(name, model)],
                        scenario.models[model].price_per_mtok.input / 1e6,
                        scenario.models[model].price_per_mtok.output / 1e6,
                    )
                    for model in spec.serves
                },
                scenario.billing.cancelled,
                streams.generator("episodes", name) if spec.episodes is not None else None,
            )
            for name, spec in scenario.providers.items()
        }
        #: Per-request difficulty factors (None: off), one stream for every policy.
        self.difficulty = None
        if scenario.difficulty is not None:
            rng = streams.generator("difficulty")
            self.difficulty = difficulty_factors(scenario.difficulty, rng, bank.n_requests)
        self.runs: list[Run] = []
        self.calls: list[Call] = []
        self.actions: list[Action] = []
        #: How the deadline reaches this policy's work (propagation, reserve, admission).
        self.rules = rules if rules is not None else rules_for(scenario, policy.name)
        self.tools = ToolDesk(self)
        disconnect = scenario.customers.disconnect
        self._disconnect_p = disconnect.probability if disconnect is not None else 0.0
        self._disconnect_after = (
            build_distribution(disconnect.after_s) if disconnect is not None else None
        )
        retry = scenario.customers.retry
        self._resend_probability = retry.probability if retry.max > 0 else 0.0
        self._resend_uniforms: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------ driving

    def run(self, arrivals: np.ndarray, progress: Callable[[int], None] | None = None) -> Records:
        """Replay `arrivals` (seconds) to the end and return the records."""
        self.env.process(self._arrivals(arrivals, progress))
        self.env.run()
        return Records(self.policy.name, self.runs, self.calls, self.actions)

    def _arrivals(
        self, times: np.ndarray, progress: Callable[[int], None] | None
    ) -> Generator[simpy.Event, Any, None]:
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
        for step in self.workflow.roots:
            env.process(self._step(run, step))
        if math.isfinite(self.deadline_s):
            env.timeout(self.deadline_s).callbacks.append(lambda _: self._deadline_passed(run))
        if self._disconnect_p > 0:
            self._schedule_disconnect(run)

    def _deadline_passed(self, run: Run) -> None:
        if math.isnan(run.end):  # still going: the run has failed
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
            self._finish(run, ok=False, end=end, cause=reason)
            return
        run.edge_done = True
        run.ok, run.end = False, end
        if reason == FAIL_DEADLINE and self._resend_probability > 0:
            self._maybe_resend(run)

    def _finish(self, run: Run, ok: bool, end: float, cause: str = BY_RUN) -> None:
        """End a run: nothing new starts, every call still in flight is cancelled now (`cause`
        becomes their `ended_by`). A run the edge already gave up on keeps that outcome."""
        run.closed = True
        if run.edge_done:
            for process in list(run.active):
                self._cancel(run, process, cause)
            return
        run.ok = ok
        run.end = end
        for process in list(run.active):
            self._cancel(run, process, cause)
        if not ok and self._resend_probability > 0 and run.fail_reason != FAIL_DISCONNECT:
            self._maybe_resend(run)

    def _maybe_resend(self, run: Run) -> None:
        """A customer re-sends a failed request whole, after a delay, with some probability."""
        retry = self.scenario.customers.retry
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

    # ------------------------------------------------------------------ steps

    def _step(self, run: Run, step: Step | None) -> Generator[simpy.Event, Any, None]:
        """Run a step, then go on with the first step it unlocks (others get processes of their
        own): a chain costs one process, a DAG one per branch."""
        while step is not None:
            handle = _StepRun(self, run, step)
            run.running = step.id
            if step.tool is None:
                ok = yield from self.policy.execute(handle)
            else:
                ok = yield from self.tools.execute(handle)
            ready = self._resolve(run, step, ok, handle.last_outcome or FAIL_NO_CALL)
            step = ready[0] if ready else None
            for other in ready[1:]:
                self.env.process(self._step(run, other))

    def _resolve(self, run: Run, step: Step, ok: bool, outcome: str) -> list[Step]:
        """Record a step's result and return the steps it made ready; fail the request if the
        step (or a required step that now cannot run) mattered, with `outcome` as the reason."""
        if run.closed:
            return []
        run.unresolved -= 1
        ready = []
        remaining = run.remaining
        if ok:
            for i in step.unlocks:
                if remaining[i] > 0:  # LOST steps (< 0) never start
                    remaining[i] -= 1
                    if remaining[i] == 0:
                        ready.append(self.workflow.steps[i])
        else:
            if step.required:
                run.failed = True
            for i in self.workflow.downstream(step.index):
                if remaining[i] != LOST:  # a step can be lost through two failed branches
                    remaining[i] = LOST
                    run.unresolved -= 1
                    run.failed = run.failed or self.workflow.steps[i].required
        if run.failed and not run.fail_reason:
            run.fail_reason, run.fail_step = outcome, step.id
        if run.failed or run.unresolved == 0:
            reserve = self.rules.reserve_s
            if run.failed or reserve == 0:
                self._finish(run, ok=not run.failed, end=self.env.now)
            elif self.env.now + reserve <= run.deadline_at or run.edge_done:
                self._finish(run, ok=True, end=self.env.now + reserve)  # validated, delivered
            else:
                run.closed = True  # nothing left to run, but too late to deliver: its deadline
            return []  # will fail it
        return ready

    # ------------------------------------------------------------------ calls

    def _call(
        self, handle: _StepRun, attempt: int, plan: Attempt
    ) -> Generator[simpy.Event, Any, Call | None]:
        """One policy attempt: a call on its provider, then the SDK's own retries, if any."""
        run = handle.run
        if run.closed:
            return None
        #: (queue budget, latest pickup, budget that binds the cut, service budget)
        limits: tuple[float | None, float, str, float | None] = (None, math.inf, BY_ATTEMPT, None)
        if not handle.plain:  # budgets, a reserve or admission: how long may this attempt run?
            limit, by = handle.limit(plan.give_up_after, None)
            if limit is not None and limit <= 0:  # no time left at all: start nothing
                handle.refuse(attempt)
                return None
            if not handle.admits(0.0, attempt):  # cannot finish in the time left
                return None
            expected = self.rules.expected
            start_by = math.inf  # picked up later, it cannot finish in time: it refuses
            if expected is not None:
                start_by = min(handle.known_end, handle.step_end) - expected[handle.step.id]
            limits = (handle.step.queue_budget_s, start_by, by, handle.step.attempt_budget_s)
            if limit != plan.give_up_after:
                plan = Attempt(plan.provider, plan.model, limit)
        provider = self.providers[plan.provider]
        call, args = self._prepare(run, handle.step, provider, attempt, plan, 0)
        process = self.env.active_process
        run.active.add(process)
        try:
            if handle.plain:
                yield from provider.call(call, *args, plan.give_up_after)
            else:
                yield from provider.call(call, *args, plan.give_up_after, *limits[:2], limits[3])
            run.calls += 1  # as `_record`, written out on the hot path
            run.cost += call.cost
            run.tokens += call.billed_input + call.billed_output
            self.calls.append(call)
            self._label(handle, call, attempt, limits[2])
            if provider.sdk_retries:
                call = yield from self._sdk_retries(handle, provider, attempt, plan, call, limits)
        finally:
            run.active.discard(process)
        handle.last_outcome = call.outcome
        if call.outcome == OUTCOME_OK:
            self._first_signal(run, call)
        return call

    @staticmethod
    def _label(handle: _StepRun, call: Call, attempt: int, by: str) -> None:
        """Name the budget that cut a call, and count a call refused at pickup."""
        if call.outcome == OUTCOME_TIMEOUT and not call.ended_by:
            call.ended_by = by
        elif call.ended_by == BY_ADMISSION:
            handle.refuse(attempt, call.sdk_retry)

    def _first_signal(self, run: Run, call: Call) -> None:
        """A step answered: its first token may be the run's first useful signal (the earliest
        valid answer's: the first step's in a chain; none once the run is over)."""
        if math.isnan(run.end):
            signal = call.start + call.queue + call.ttft - run.arrival
            if not signal >= run.first_signal:  # True while first_signal is NaN
                run.first_signal = signal

    def _prepare(
        self, run: Run, step: Step, provider: Provider, attempt: int, plan: Attempt, sdk: int
    ) -> tuple[Call, tuple[float, float, float, int]]:
        """A call about to be sent and its draws (common random numbers): first token,
        generation (times the request's difficulty), stall, drawn outcome."""
        latency = self.latencies[(plan.provider, plan.model)]
        draws = (
            self.bank.draws(
                step.id,
                attempt,
                run.resend,
                (plan.provider, plan.model),
                latency,
                step.output_tokens,
            )
            if sdk == 0
            else self.bank.draws(
                step.id,
                attempt,
                run.resend,
                (plan.provider, plan.model),
                latency,
                step.output_tokens,
                sdk,
            )
        )
        i = run.index
        ttft, generation = draws.ttft[i], draws.generation[i]
        if self.difficulty is not None:
            ttft, generation = ttft * self.difficulty[i], generation * self.difficulty[i]
        call = Call(
            run,
            step.id,
            attempt,
            plan.provider,
            plan.model,
            self.env.now,
            step.input_tokens,
            step.output_tokens,
            reserved=step.reserved_output,
        )
        if sdk:
            call.sdk_retry = sdk
        if provider.spell_error_rate > 0:
            call.spell_u = self.bank.uniform(i, "spell", step.id, attempt, run.resend, sdk)
        return call, (ttft, generation, draws.stall[i], draws.outcome[i])

    def _record(self, run: Run, call: Call) -> None:
        """Add an ended call to its run's totals and to the records."""
        run.calls += 1
        run.cost += call.cost
        run.tokens += call.billed_input + call.billed_output
        self.calls.append(call)

    def _sdk_retries(
        self,
        handle: _StepRun,
        provider: Provider,
        attempt: int,
        plan: Attempt,
        call: Call,
        limits: tuple[float | None, float, str, float | None],
    ) -> Generator[simpy.Event, Any, Call]:
        """The SDK's hidden retries inside one policy attempt: after a 429 or a hard error it
        waits (Retry-After up to its cap, else its backoff) and calls again, up to
        `sdk.retries` times. It gives up early when the wait would pass the policy's cut or the
        deadline, or when the attempt is cancelled while it waits; with admission, also when
        the time left cannot fund the wait and an attempt (counted as a refused retry)."""
        run, env = handle.run, self.env
        backoff = provider.sdk.backoff
        began = call.start
        for j in range(1, provider.sdk_retries + 1):
            if run.closed or call.outcome not in (OUTCOME_RATE_LIMITED, OUTCOME_ERROR):
                break
            u = self.bank.uniform(run.index, "sdk-backoff", handle.step.id, attempt, run.resend, j)
            wait = retry_wait(backoff, j, u, call.retry_after)
            left = None
            if plan.give_up_after is not None:
                left = plan.give_up_after - (env.now - began) - wait
                if left <= 0:
                    break  # the policy's cut comes first: the attempt ends with this failure
            if wait >= handle.time_left:
                break
            if not handle.admits(wait, attempt, j):
                break
            if wait > 0:
                try:
                    yield env.timeout(wait)
                except simpy.Interrupt:  # cancelled while the SDK slept
                    break
            if run.closed:
                break
            call, args = self._prepare(run, handle.step, provider, attempt, plan, j)
            try:
                yield from provider.call(call, *args, left, *limits[:2], limits[3])
            finally:
                self._record(run, call)
            self._label(handle, call, attempt, limits[2])
        return call

    @staticmethod
    def _cancel(run: Run, process: simpy.Process, cause: str = CANCEL) -> None:
        if process in run.active and process.is_alive:
            run.active.discard(process)
            process.interrupt(cause)


class _StepRun:
    """The engine's handle for a policy running one step of one run."""

    __slots__ = ("env", "known_end", "last_outcome", "plain", "run", "sim", "step", "step_end",
                 "work_end")  # fmt: skip

    def __init__(self, sim: Simulation, run: Run, step: Step) -> None:
        self.sim = sim
        self.env = sim.env
        self.run = run
        self.step = step
        self.last_outcome = ""  # outcome of this step's call that ended last
        rules = sim.rules
        #: When this step's budget runs out (inf: no step budget).
        self.step_end = self.env.now + step.budget_s
        #: The end of the request's time as this step's work knows it: the deadline less the
        #: reserve with propagation; without, the work does not know the deadline (inf).
        self.known_end = run.deadline_at - rules.reserve_s if rules.propagate else math.inf
        #: Where attempts are cut for the request's time (inf: the deadline cancels them).
        self.work_end = self.known_end if rules.caps_attempts else math.inf
        #: Nothing to check per attempt: today's fast path.
        self.plain = (
            self.step_end == math.inf
            and self.work_end == math.inf
            and step.attempt_budget_s is None
            and step.queue_budget_s is None
            and rules.expected is None
        )

    @property
    def closed(self) -> bool:
        return self.run.closed

    @property
    def time_left(self) -> float:
        """Seconds this step's work may still use: until the request's deadline less the reserve
        (inf without propagation: the work does not know it) or its step budget, if sooner."""
        return min(self.known_end, self.step_end) - self.env.now

    def limit(self, own: float | None, attempt_budget: float | None) -> tuple[float | None, str]:
        """(seconds an attempt starting now may run, the budget that binds): see
        `sim.deadlines.attempt_limit` (an LLM call's attempt budget is counted from its slot
        grant, by the provider, so it passes None here)."""
        return attempt_limit(self.env.now, own, attempt_budget, self.step_end, self.work_end)

    def admits(self, wait: float, attempt: int = 1, sdk: int = 0) -> bool:
        """Deadline-aware admission of an attempt after `wait` seconds: True when admission is
        off or the time left exceeds the wait plus the step's expected attempt time; a refusal
        is counted on the run."""
        expected = self.sim.rules.expected
        if expected is None or admits(self.time_left, wait, expected[self.step.id]):
            return True
        self.refuse(attempt, sdk)
        return False

    def refuse(self, attempt: int, sdk: int = 0) -> None:
        """Count an attempt refused for lack of time (a step's first, or a retry)."""
        if attempt == 0 and sdk == 0:
            self.run.refused_starts += 1
        else:
            self.run.refused_retries += 1
        if not self.last_outcome:
            self.last_outcome = FAIL_REFUSED

    def call(self, attempt: int, plan: Attempt) -> Generator[simpy.Event, Any, Call | None]:
        return self.sim._call(self, attempt, plan)

    def start(self, attempt: int, plan: Attempt) -> simpy.Process:
        return self.env.process(self.sim._call(self, attempt, plan))

    def cancel(self, process: simpy.Process) -> None:
        Simulation._cancel(self.run, process, BY_LOSER)

    def jitter(self, retry: int) -> float:
        """This run's backoff-jitter uniform for the step's retry number `retry` (the same
        under every policy)."""
        return self.sim.bank.uniform(
            self.run.index, "backoff", self.step.id, retry, self.run.resend
        )


def serving_latencies(scenario: Scenario) -> dict[tuple[str, str], CallLatency]:
    """The latency law of every (provider, model) serving path."""
    return {
        (pname, mname): CallLatency.from_spec(serving)
        for pname, provider in scenario.providers.items()
        for mname, serving in provider.serves.items()
    }
