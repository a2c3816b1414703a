"""The vectorized engine: numpy over requests, step by step over the DAG, when nothing is shared.

When no call ever waits for a slot or a quota and no customer re-sends, every request lives alone
in time, so its whole workflow can be computed for all requests at once, one step (and attempt)
at a time, from the same named random streams as the event engine (`CallDrawBank.uniforms`).
Its tables have the columns of `sim.analysis.metrics`, and on a qualifying scenario they equal
the event engine's per request up to float rounding. `sim.engine.qualify` says when it may run.

The rules reproduced from `sim.engine.simulation`, `sim.engine.event_calls` and `sim.policy.kinds`
(see each part's docstrings): a call ending exactly at the deadline is cancelled by it; race
attempts ending at the same instant as the winner complete normally; a hedge timer and a call
ending together are seen together; a step failing a run cancels every call of the run still in
flight. A provider's client rules (SDK retries, its timeout, overhead) are reproduced per call
as `sim.engine.event_calls` lives them (`sim.engine.vector_client`).

This module owns the driver, `VectorizedSimulation`: the steps in dependency order, each run's
result from its steps' results, and the replay through the event engine of the few requests
whose order of events only simpy can tell. Its work is split by job into four mixins: a step
under the policy (`sim.engine.vector_steps`), a call slot's draws and uninterrupted life
(`sim.engine.vector_draws`), a policy attempt under a client that acts on its own
(`sim.engine.vector_client`), and the calls' log, cancellations and billing
(`sim.engine.vector_calls`); the tables are built by `sim.engine.vector_tables`.
"""

from __future__ import annotations

import numpy as np

from sim.engine.simulation import Simulation
from sim.engine.vector_calls import CallArrays, CallLog, UnsupportedError, VectorCalls
from sim.engine.vector_client import Client, VectorClient
from sim.engine.vector_draws import VectorDraws
from sim.engine.vector_steps import S_DEADLINE, S_FAILED, S_NONE, S_OK, VectorSteps
from sim.model.rows import FAIL_DEADLINE, OUTCOMES, Call
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step
from sim.plan import Plan
from sim.policy.deadlines import ENDED_BY
from sim.policy.plans import Policy


class VectorizedSimulation(VectorSteps, VectorDraws, VectorClient, VectorCalls):
    """One policy of a plan, computed for all requests at once (no shared state)."""

    def __init__(
        self,
        plan: Plan,
        policy: Policy,
        bank: CallDrawBank,
        deadline_s: float | None = None,
    ) -> None:
        if not policy.has_twin():
            raise UnsupportedError(f"policy class {type(policy).__name__} is not vectorized")
        self.plan = plan
        self.policy = policy
        self.bank = bank
        self.deadline_s = plan.deadline_s if deadline_s is None else deadline_s
        self.workflow = plan.workflow
        self.latencies = plan.latencies
        self.providers = list(plan.providers)
        self.models = list(plan.models)
        self.billing = plan.billing
        self.log = CallLog()
        #: Per model (in `models` order): (input, output) dollars per token.
        self._prices = [(m.price_input, m.price_output) for m in plan.models.values()]
        self._probed: set[tuple[str, int, str, str, int, int]] = set()
        #: Hard requests (None: off) and, per request of the bank, whether it is hard.
        self.hardness = plan.hardness
        self._hard = None if self.hardness is None else self.hardness.flags(bank)
        #: Per provider whose client acts on its own (SDK retries, timeout, overhead): its rules.
        self._clients = {
            name: client
            for name, spec in plan.provider_specs.items()
            if (client := Client.of(spec)) is not None
        }
        self._columns: dict[tuple[str | int, ...], np.ndarray] = {}  # per-request streams
        self._probed_client: set[tuple[str | int, ...]] = set()
        #: Requests whose order of simultaneous events only the event engine can tell.
        self._unclear: list[np.ndarray] = []

    # ------------------------------------------------------------------ driving

    def run(
        self, arrivals: np.ndarray, clocked: bool = False
    ) -> tuple[np.ndarray, dict[str, np.ndarray], CallArrays]:
        """Simulate every request; return (arrival times as the clock saw them, the per-request
        columns, the calls). `clocked`: the arrivals already are as the clock saw them (a chunk
        of `clock_arrivals` over all requests)."""
        n = len(arrivals)
        if n != self.bank.n_requests:
            raise UnsupportedError("the draw bank is sized for another number of requests")
        arrival = np.asarray(arrivals, dtype=float)
        if not clocked:
            arrival = clock_arrivals(arrival)
        deadline = arrival + self.deadline_s
        steps = self.workflow.steps
        count = len(steps)
        start = np.full((count, n), np.nan)
        end = np.full((count, n), np.nan)
        state = np.zeros((count, n), dtype=np.int8)
        last = np.zeros((count, n), dtype=np.int8)
        for j in topological_order(steps):
            step = steps[j]
            if len(step.depends_on) == 1:  # a chain: no stacking
                ready, at = state[step.depends_on[0]] == S_OK, end[step.depends_on[0]]
            elif step.depends_on:
                ready = np.logical_and.reduce([state[d] == S_OK for d in step.depends_on])
                at = np.max([end[d] for d in step.depends_on], axis=0)
            else:
                ready, at = np.ones(n, dtype=bool), arrival
            rows = np.flatnonzero(ready)
            np.copyto(start[j], at, where=ready)
            if not len(rows):
                continue
            result = self._step(step, rows, at[rows], deadline[rows])
            # rows are where `ready` is true, in order: a mask puts them back (no index scatter)
            state[j][ready], end[j][ready], last[j][ready] = result.state, result.end, result.last
        runs = self._resolve_runs(arrival, deadline, start, end, state, last)
        closed_at, failing = runs.pop("_closed_early"), runs.pop("_failing_step")
        calls, unclear = self._finish_calls(closed_at, failing, deadline)
        if self._unclear:
            unclear = np.union1d(unclear, np.concatenate(self._unclear)).astype(np.int64)
        if len(unclear):
            runs, calls = self._replay(unclear, arrival, runs, calls)
        return arrival, runs, calls

    # ------------------------------------------------------------------ runs and calls

    def _resolve_runs(
        self,
        arrival: np.ndarray,
        deadline: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        state: np.ndarray,
        last: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """Each run's result from its steps' results (as `Simulation._resolve` and the deadline
        timer decide): the first failure that loses a required step fails it at once; otherwise
        a step cut by the deadline fails it at the deadline; otherwise it succeeds as its last
        step resolves."""
        steps = self.workflow.steps
        n = len(arrival)
        critical = [
            s.required or any(steps[i].required for i in self.workflow.downstream(s.index))
            for s in steps
        ]
        fail_at = np.full(n, np.inf)
        fail_step = np.full(n, -1, dtype=np.int64)
        for j in topological_order(steps):
            if critical[j]:
                earlier = (state[j] == S_FAILED) & (end[j] < fail_at)
                np.copyto(fail_at, end[j], where=earlier)
                np.copyto(fail_step, j, where=earlier)
        early = fail_at < np.inf
        late = ~early & (state == S_DEADLINE).any(axis=0)
        ok = ~early & ~late
        # the step started last (ties: the later in file order, as processes start in order)
        running = np.full(n, -1, dtype=np.int64)
        latest = np.full(n, -np.inf)
        for j in range(len(steps)):
            newer = (state[j] != S_NONE) & (start[j] >= latest)
            np.copyto(running, j, where=newer)
            np.copyto(latest, start[j], where=newer)
        if len(steps) > 1 and late.any():
            self._unclear_running(np.flatnonzero(late), start, end, state, latest)
        finished = np.fmax.reduce(np.where(state == S_NONE, np.nan, end), axis=0)
        run_end = np.where(ok, finished, np.where(early, fail_at, deadline))
        ids = np.asarray([s.id for s in steps] + [""], dtype=object)
        names = np.asarray(OUTCOMES, dtype=object)
        reason = np.full(n, "", dtype=object)
        where_step = np.full(n, "", dtype=object)
        reason[late], where_step[late] = FAIL_DEADLINE, ids[running[late]]
        reason[early] = names[last[fail_step[early], np.flatnonzero(early)]]
        where_step[early] = ids[fail_step[early]]
        return {
            "arrival": arrival,
            "deadline": deadline,
            "ok": ok,
            "end": run_end,
            "fail_reason": reason,
            "fail_step": where_step,
            "_closed_early": np.where(early, fail_at, np.inf),
            "_failing_step": fail_step,
        }

    def _unclear_running(
        self,
        rows: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        state: np.ndarray,
        latest: np.ndarray,
    ) -> None:
        """Note the runs `rows` (failed at their deadline) whose step then running is not the
        file order's to tell: steps started at that same latest instant by different steps'
        ends (or by a join whose steps ended together) started in the order those ends came
        in, simpy's. Steps started together by one step (its unlocks, in file order) or at the
        arrival (the roots, in file order) are told by file order."""
        steps = self.workflow.steps
        at, ends = start[:, rows], end[:, rows]
        tied = (at == latest[rows]) & (state[:, rows] != S_NONE)
        several = tied.sum(axis=0) > 1
        if not several.any():
            return
        rows, at, ends, tied = rows[several], at[:, several], ends[:, several], tied[:, several]
        trigger = np.full(at.shape, -1, dtype=np.int64)  # -1: the arrival; -2: a tie of ends
        for step in steps:
            if step.depends_on:
                deps = list(step.depends_on)
                last = ends[deps].max(axis=0)
                trigger[step.index] = np.asarray(deps)[np.argmax(ends[deps], axis=0)]
                trigger[step.index][(ends[deps] == last).sum(axis=0) > 1] = -2
        lowest = np.where(tied, trigger, np.iinfo(np.int64).max).min(axis=0)
        highest = np.where(tied, trigger, np.iinfo(np.int64).min).max(axis=0)
        unclear = (lowest != highest) | (lowest == -2)
        if unclear.any():
            self._unclear.append(rows[unclear])

    def _replay(
        self,
        which: np.ndarray,
        arrival: np.ndarray,
        runs: dict[str, np.ndarray],
        calls: CallArrays,
    ) -> tuple[dict[str, np.ndarray], CallArrays]:
        """Run requests `which` through the event engine (on their own rows of the same draws:
        requests share nothing) and put their results in place of ours. Each simulation's clock
        must reach every arrival exactly where the whole run's did (`exact_clock_groups`)."""
        theirs: list[Call] = []
        owners: list[int] = []  # each call's request
        for part in exact_clock_groups(arrival[which]):
            rows = which[part]
            bank = _RowsBank(self.bank, rows)
            sim = Simulation(self.plan, self.policy, bank, bank.streams, self.deadline_s)
            records = sim.run(arrival[rows])
            for run in records.runs:
                i = rows[run.index]
                runs["ok"][i], runs["end"][i] = run.ok, run.end
                runs["fail_reason"][i], runs["fail_step"][i] = run.fail_reason, run.fail_step
            theirs += records.calls
            owners += rows[[c.run.index for c in records.calls]].tolist()
        keep = ~np.isin(calls.request, which)
        step_index = {s.id: s.index for s in self.workflow.steps}
        replayed = {
            "request": np.asarray(owners, dtype=np.int64),
            "step": np.asarray([step_index[c.step] for c in theirs], dtype=np.int32),
            "attempt": np.asarray([c.attempt for c in theirs], dtype=np.int32),
            "provider": np.asarray([self.providers.index(c.provider) for c in theirs], np.int32),
            "model": np.asarray([self.models.index(c.model) for c in theirs], dtype=np.int32),
            "start": np.asarray([c.start for c in theirs], dtype=float),
            "end": np.asarray([c.end for c in theirs], dtype=float),
            "ttft": np.asarray([c.ttft for c in theirs], dtype=float),
            "outcome": np.asarray([OUTCOMES.index(c.outcome) for c in theirs], dtype=np.int8),
            "billed_input": np.asarray([c.billed_input for c in theirs], dtype=np.int64),
            "billed_output": np.asarray([c.billed_output for c in theirs], dtype=np.int64),
            "cost": np.asarray([c.cost for c in theirs], dtype=float),
            "quota_tokens": np.asarray([c.quota_tokens for c in theirs], dtype=np.int64),
            "ended_by": np.asarray([ENDED_BY.index(c.ended_by) for c in theirs], dtype=np.int8),
            "tokens_streamed": np.asarray([c.tokens_streamed for c in theirs], dtype=np.int64),
        }
        if calls.sdk_retry is not None:  # a client's calls: their SDK retries and overheads
            replayed["sdk_retry"] = np.asarray([c.sdk_retry for c in theirs], dtype=np.int64)
            replayed["overhead"] = np.asarray([c.overhead for c in theirs], dtype=float)
        merged = {
            name: np.concatenate((getattr(calls, name)[keep], values))
            for name, values in replayed.items()
        }
        return runs, CallArrays(**merged)


class _RowsBank(CallDrawBank):
    """The rows `rows` of another bank's draws, as request indices 0, 1, ... (for a replay)."""

    def __init__(self, parent: CallDrawBank, rows: np.ndarray) -> None:
        super().__init__(parent.streams, len(rows))
        self.parent = parent
        self.rows = rows

    def uniforms(self, step: str, attempt: int, resend: int, sdk: int = 0) -> np.ndarray:
        return self.parent.uniforms(step, attempt, resend, sdk)[self.rows]

    def uniform(self, index: int, *key: str | int) -> float:
        return self.parent.uniform(int(self.rows[index]), *key)

    def length_uniforms(self, step: str, attempt: int, resend: int) -> list[float]:
        column = self.parent.length_uniforms(step, attempt, resend)
        return [column[int(r)] for r in self.rows]


def exact_clock_groups(times: np.ndarray) -> list[np.ndarray]:
    """Arrival instants `times` (as the whole run's clock reached them, in order) split into
    groups a fresh event-engine clock reaches exactly: from 0, its first instant is exact, and
    each next one `at` is `now + (at - now)`, which rounds to `at` when the two are close; a
    new group starts where it would not (a request's start off by a rounding would move its
    numbers)."""
    groups, current, now = [], [], 0.0
    for k, at in enumerate(times.tolist()):
        if current and at > now and now + (at - now) != at:
            groups.append(np.asarray(current, dtype=np.int64))
            current = []
        current.append(k)
        now = at
    if current:
        groups.append(np.asarray(current, dtype=np.int64))
    return groups


def clock_arrivals(times: np.ndarray) -> np.ndarray:
    """The arrival instants as the event engine's clock reaches them (now + (at - now))."""
    if not len(times):
        return times.copy()
    previous = np.concatenate(([0.0], times[:-1]))
    clock = np.where(times > previous, previous + (times - previous), previous)
    if np.array_equal(clock, times):
        return clock
    now, out = 0.0, np.empty_like(times)
    for i, at in enumerate(times.tolist()):
        if at > now:
            now += at - now
        out[i] = now
    return out


def topological_order(steps: tuple[Step, ...]) -> list[int]:
    """Step indices with every step after the steps it depends on (file order otherwise)."""
    order: list[int] = []
    placed: set[int] = set()
    while len(order) < len(steps):
        for step in steps:
            if step.index not in placed and all(d in placed for d in step.depends_on):
                order.append(step.index)
                placed.add(step.index)
    return order


def simulate(
    plan: Plan,
    policy: Policy,
    bank: CallDrawBank,
    arrivals: np.ndarray,
    deadline_s: float | None = None,
    clocked: bool = False,
) -> tuple[dict[str, np.ndarray], CallArrays]:
    """One policy on all requests: (per-request columns, calls). Raises `UnsupportedError`.
    `clocked`: see `VectorizedSimulation.run`."""
    engine = VectorizedSimulation(plan, policy, bank, deadline_s)
    _, runs, calls = engine.run(arrivals, clocked)
    return runs, calls
