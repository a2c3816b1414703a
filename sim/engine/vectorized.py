"""The vectorized engine: numpy over requests, step by step over the DAG, when nothing is shared.

When no call ever waits for a slot or a quota and no customer re-sends, every request lives alone
in time, so its whole workflow can be computed for all requests at once, one step (and attempt)
at a time, from the same named random streams as the event engine (`CallDrawBank.uniforms`).
The tables it returns have the columns of `sim.analysis.metrics`, and on a qualifying scenario they
equal
the event engine's per request up to float rounding. `sim.engine.qualify` says when it may run.

The rules reproduced from `sim.engine.simulation`, `sim.model.provider` and `sim.policy.kinds` (see
the docstrings
below for each): a call ending exactly at the deadline is cancelled by it; race attempts ending at
the same instant as the winner complete normally; a hedge timer and a call ending together are
seen together; a step failing a run cancels every call of the run still in flight.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import ndtri

from sim.analysis.metrics import CALL_COLUMNS, REQUEST_COLUMNS
from sim.engine.simulation import Simulation, serving_latencies
from sim.model.config import Scenario
from sim.model.hardness import Hardness, hard_tokens
from sim.model.latency import (
    ERROR,
    INVALID,
    OK,
    U_OUTCOME,
    U_SPEED,
    U_STALL,
    U_STALL_EXTRA,
    U_TTFT,
    UNIFORMS_PER_CALL,
    CallLatency,
    Distribution,
    LogNormal,
)
from sim.model.provider import (
    _SAME_INSTANT,
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    OUTCOMES,
)
from sim.model.rows import FAIL_DEADLINE
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step, Workflow
from sim.policy.deadlines import BY_ATTEMPT, BY_DEADLINE, BY_LOSER, BY_RUN, ENDED_BY
from sim.policy.kinds import Hedge, Race, Sequential
from sim.policy.plans import Attempt, Policy

# Outcome codes: indices into OUTCOMES (the `outcome` column).
O_OK, O_INVALID, O_ERROR = (OUTCOMES.index(o) for o in (OUTCOME_OK, OUTCOME_INVALID, OUTCOME_ERROR))
O_TIMEOUT, O_CANCELLED = OUTCOMES.index(OUTCOME_TIMEOUT), OUTCOMES.index(OUTCOME_CANCELLED)
#: Drawn outcome (sim.model.latency OK / ERROR / INVALID) -> outcome code of a call that ran to its
#: end.
_DRAWN_OUTCOME = np.zeros(3, dtype=np.int8)
_DRAWN_OUTCOME[[OK, ERROR, INVALID]] = [O_OK, O_ERROR, O_INVALID]
# What ended a call early: indices into ENDED_BY (the `ended_by` column; "" ended on its own).
E_NONE, E_ATTEMPT, E_DEADLINE, E_LOSER, E_RUN = (
    ENDED_BY.index(e) for e in ("", BY_ATTEMPT, BY_DEADLINE, BY_LOSER, BY_RUN)
)

# How a call's uninterrupted life ends (before any cancellation).
K_NATURAL, K_CUT, K_UNSERVED = 0, 1, 2  # ran to its end / cut at give-up / cut as it got a slot

# Step states per request.
S_NONE, S_OK, S_FAILED, S_DEADLINE = (
    0,
    1,
    2,
    3,
)  # not started / succeeded / failed / cut by deadline

#: Rows of each draw block checked against `CallLatency.draw` itself (a changed law falls back).
_PROBE_ROWS = 16
#: A call slot needed by at most one request in this many draws only those requests' uniforms
#: (a jump and a draw per row costs about what drawing this many rows does).
_SPARSE_ROWS = 200


class UnsupportedError(Exception):
    """The vectorized engine cannot reproduce this case; the event engine must run it."""


@dataclass
class VectorTables:
    """The requests and calls tables of one policy, as `sim.analysis.metrics` builds them."""

    requests: pd.DataFrame
    calls: pd.DataFrame


@dataclass
class CallArrays:
    """Every call of one simulation as columns (one row per call, no per-call objects)."""

    request: np.ndarray  # int64 request index
    step: np.ndarray  # int32 step index
    attempt: np.ndarray  # int32
    provider: np.ndarray  # int32 index into providers
    model: np.ndarray  # int32 index into models
    start: np.ndarray  # float seconds
    end: np.ndarray
    ttft: np.ndarray  # NaN unless the call ran to its end without a hard error
    outcome: np.ndarray  # int8 index into OUTCOMES
    billed_input: np.ndarray  # int64
    billed_output: np.ndarray
    cost: np.ndarray
    quota_tokens: np.ndarray  # int64 tokens the quota took at admission
    ended_by: np.ndarray  # int8 index into ENDED_BY: what ended it early (0: nothing)


@dataclass
class _Chunk:
    """The calls of one call slot (step, attempt) for some requests, as lived uninterrupted
    but for the policy's and the deadline's cancellations; `_CallLog.columns` finishes them."""

    rows: np.ndarray  # request indices (int64)
    step: int
    attempt: int
    provider: int
    model: int
    start: np.ndarray
    natural: np.ndarray  # natural end (or cut at give-up)
    kind: np.ndarray  # K_NATURAL / K_CUT / K_UNSERVED
    drawn: np.ndarray  # drawn outcome (sim.model.latency OK / ERROR / INVALID)
    ttft: np.ndarray  # drawn first token
    generating: np.ndarray  # drawn generation plus stall
    cancel_at: np.ndarray  # the policy's or the deadline's cancellation (inf: none)
    deadline: np.ndarray  # the run's deadline
    input_tokens: int
    output_tokens: int


#: Raw fields of a chunk that `VectorizedSimulation._settle` reads.
_RAW = ("start", "natural", "kind", "drawn", "ttft", "generating", "cancel_at", "deadline")
_DTYPES = {
    "request": np.int64, "step": np.int32, "attempt": np.int32, "provider": np.int32,
    "model": np.int32, "start": float, "end": float, "ttft": float, "outcome": np.int8,
    "billed_input": np.int64, "billed_output": np.int64, "cost": float,
    "quota_tokens": np.int64, "ended_by": np.int8,
}  # fmt: skip


class _CallLog:
    """Calls as they are computed, one chunk per call slot and set of requests."""

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []

    def add(self, chunk: _Chunk) -> None:
        self.chunks.append(chunk)

    def columns(
        self, final: Callable[[_Chunk, dict[str, np.ndarray]], None]
    ) -> dict[str, np.ndarray]:
        """Every CallArrays column over all chunks, in chunk order: each chunk's slice written
        in place by `final(chunk, its slices)` (no per-chunk temporaries to concatenate)."""
        total = sum(len(c.rows) for c in self.chunks)
        out = {name: np.empty(total, dtype=dtype) for name, dtype in _DTYPES.items()}
        offset = 0
        for c in self.chunks:
            k = offset + len(c.rows)
            part = {name: values[offset:k] for name, values in out.items()}
            part["request"][:] = c.rows
            part["step"].fill(c.step)
            part["attempt"].fill(c.attempt)
            part["provider"].fill(c.provider)
            part["model"].fill(c.model)
            part["start"][:] = c.start
            final(c, part)
            offset = k
        return out

    def gather(self, which: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(positions in `columns()`, raw fields plus request, step and model) of the calls of
        the requests where `which` (a boolean per request) is true."""
        positions, parts, offset = [], [], 0
        for c in self.chunks:
            local = np.flatnonzero(which[c.rows])
            if len(local):
                positions.append(local + offset)
                part = {name: getattr(c, name)[local] for name in _RAW}
                part["request"] = c.rows[local]
                for name in ("step", "model", "output_tokens"):
                    part[name] = np.full(len(local), getattr(c, name), dtype=np.int64)
                parts.append(part)
            offset += len(c.rows)
        if not parts:
            return np.zeros(0, dtype=np.int64), {}
        fields = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        return np.concatenate(positions), fields


@dataclass
class _StepResult:
    """How one step ended for the requests that started it (arrays aligned with their rows)."""

    state: np.ndarray  # S_OK / S_FAILED / S_DEADLINE
    end: np.ndarray  # when it resolved (the deadline for S_DEADLINE)
    last: np.ndarray  # outcome code of its call that ended last (the reason of a failure)


class VectorizedSimulation:
    """One policy on one scenario, computed for all requests at once (no shared state)."""

    def __init__(
        self,
        scenario: Scenario,
        policy: Policy,
        bank: CallDrawBank,
        deadline_s: float | None = None,
        latencies: dict[tuple[str, str], CallLatency] | None = None,
    ) -> None:
        if type(policy) not in (Sequential, Race, Hedge):
            raise UnsupportedError(f"policy class {type(policy).__name__} is not vectorized")
        self.scenario = scenario
        self.policy = policy
        self.bank = bank
        self.deadline_s = scenario.deadline_s if deadline_s is None else deadline_s
        self.workflow = Workflow.from_scenario(scenario)
        self.latencies = latencies or serving_latencies(scenario)
        self.providers = list(scenario.providers)
        self.models = list(scenario.models)
        self.billing = scenario.billing.cancelled
        self.log = _CallLog()
        #: Per model (in `models` order): (input, output) dollars per token.
        self._prices = [
            (
                scenario.models[m].price_per_mtok.input / 1e6,
                scenario.models[m].price_per_mtok.output / 1e6,
            )
            for m in self.models
        ]
        self._probed: set[tuple[str, int, str, str, int]] = set()
        #: Hard requests (None: off) and, per request of the bank, whether it is hard.
        self.hardness = Hardness.of(scenario, self.latencies)
        self._hard = None if self.hardness is None else self.hardness.flags(bank)

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
        if len(unclear):
            runs, calls = self._replay(unclear, arrival, runs, calls)
        return arrival, runs, calls

    def _step(
        self, step: Step, rows: np.ndarray, start: np.ndarray, deadline: np.ndarray
    ) -> _StepResult:
        policy = self.policy
        if isinstance(policy, Sequential):
            return self._sequential(step, policy.plans[step.id], rows, start, deadline)
        if isinstance(policy, Race):
            return self._race(step, policy.rounds[step.id], rows, start, deadline)
        assert isinstance(policy, Hedge)
        return self._hedge(
            step, policy.plans[step.id], policy.after[step.id], rows, start, deadline
        )

    # ------------------------------------------------------------------ one call slot

    def _draws(
        self, step: Step, attempt: int, plan: Attempt, rows: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(first token, generation, which rows stall, their stalls, drawn outcome) of this call
        slot for `rows`: the bank's uniforms transformed as `CallLatency.draw` does (checked
        against it). Only the columns used are gathered, and only the stalled rows' extra."""
        latency = self.latencies[(plan.provider, plan.model)]
        block = self._uniforms(step.id, attempt, rows)
        aligned = len(rows) == len(block)  # row i of the block is rows[i] (sorted, unique)

        def column(c: int, which: np.ndarray | None = None) -> np.ndarray:
            if which is None:
                return block[:, c] if aligned else block[rows, c]
            return block[which if aligned else rows[which], c]

        ttft = _transform(latency.ttft, column(U_TTFT))
        generation = _transform(latency.tokens_per_s, column(U_SPEED))
        np.maximum(generation, 1e-9, out=generation)
        np.divide(step.output_tokens, generation, out=generation)
        if latency.stall_extra is not None and latency.stall_probability > 0:
            stalled = np.flatnonzero(column(U_STALL) < latency.stall_probability)
            extra = latency.stall_extra.from_uniform(column(U_STALL_EXTRA, stalled))
        else:
            stalled, extra = np.zeros(0, dtype=np.int64), np.zeros(0)
        v = column(U_OUTCOME)
        drawn = np.full(len(rows), OK, dtype=np.int8)
        drawn[v < latency.error_rate + latency.invalid_rate] = INVALID
        drawn[v < latency.error_rate] = ERROR
        key = (step.id, attempt, plan.provider, plan.model, step.output_tokens)
        if key not in self._probed:
            k = min(len(rows), _PROBE_ROWS)
            stall = np.zeros(k)
            head = stalled < k
            stall[stalled[head]] = extra[head]
            u = block[:k] if aligned else block[rows[:k]]
            mine = (ttft[:k], generation[:k], stall, drawn[:k])
            self._probe(latency, u, step.output_tokens, mine)
            self._probed.add(key)
        if self._hard is not None and plan.model in self.hardness.effects:  # type: ignore[union-attr]
            self._harden(plan, rows, v, drawn, generation, step.output_tokens)
        return ttft, generation, stalled, extra, drawn

    def _harden(
        self,
        plan: Attempt,
        rows: np.ndarray,
        v: np.ndarray,
        drawn: np.ndarray,
        generation: np.ndarray,
        output_tokens: int,
    ) -> None:
        """A hard request's calls on an affected model, in place: outcome from its junk rate,
        generation scaled to its answer length (as `Simulation._prepare`, `sim.model.hardness`)."""
        hardness, hard = self.hardness, self._hard[rows]  # type: ignore[index]
        assert hardness is not None
        if not hard.any():
            return
        hardness.outcomes((plan.provider, plan.model), hard, v, drawn)
        tokens = hard_tokens(output_tokens, hardness.length(plan.model))
        if tokens != output_tokens:
            generation[hard] *= tokens / output_tokens

    def _uniforms(self, step: str, attempt: int, rows: np.ndarray) -> np.ndarray:
        """The bank's uniform block of this call slot, or only its rows `rows` (in their order)
        when they are few: drawn from the same stream, jumping over the rows not needed
        (`_SPARSE_ROWS`), as the bank would draw the whole block. Checked for each slot
        against a two-row bank of the same streams; otherwise the bank's block."""
        bank = self.bank
        if type(bank) is not CallDrawBank or len(rows) * _SPARSE_ROWS > bank.n_requests:
            return bank.uniforms(step, attempt, 0)
        generator = bank.streams.generator("call", step, attempt, 0)
        bits = generator.bit_generator
        if not isinstance(bits, np.random.PCG64):
            return bank.uniforms(step, attempt, 0)
        bits.advance(bank.first * UNIFORMS_PER_CALL)  # a chunk's bank starts at request `first`
        check = CallDrawBank(bank.streams, 2, bank.first).uniforms(step, attempt, 0)
        if not np.array_equal(generator.random(check.shape), check):
            return bank.uniforms(step, attempt, 0)
        out = np.empty((len(rows), UNIFORMS_PER_CALL))
        drawn = check.size  # doubles drawn so far (one 64-bit step each)
        for i, row in enumerate(rows.tolist()):
            bits.advance(row * UNIFORMS_PER_CALL - drawn)
            out[i] = generator.random(UNIFORMS_PER_CALL)
            drawn = (row + 1) * UNIFORMS_PER_CALL
        return out

    @staticmethod
    def _probe(
        latency: CallLatency,
        u: np.ndarray,
        output_tokens: int,
        ours: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        """Check the first rows (`u`) against `CallLatency.draw`: a changed law must not go
        unseen."""
        theirs = latency.draw(u, output_tokens)
        expected = (theirs.ttft, theirs.generation, theirs.stall, theirs.outcome)
        for mine, reference in zip(ours, expected, strict=True):
            if not np.array_equal(mine, np.asarray(reference, dtype=mine.dtype)):
                raise UnsupportedError("CallLatency.draw no longer matches the vector transform")

    def _attempt(
        self, step: Step, attempt: int, plan: Attempt, rows: np.ndarray, start: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
        """One call slot started at `start`, uninterrupted (as `Provider.call` with a free slot):
        (natural end, kind, outcome code, (drawn, ttft, generating) for billing)."""
        ttft, generation, stalled, extra, drawn = self._draws(step, attempt, plan, rows)
        # service: ttft + generation + stall (summed in that order), ttft alone if it failed
        service = ttft + generation
        generating = generation  # ours to change: generation + stall
        if len(stalled):
            service[stalled] += extra
            generating[stalled] += extra
        np.copyto(service, ttft, where=drawn != OK)
        give_up = plan.give_up_after
        kind = np.zeros(len(rows), dtype=np.int8)  # K_NATURAL
        if give_up is None:
            natural = np.add(start, service, out=service)
        elif give_up <= _SAME_INSTANT:  # granted its slot at its give-up instant: cut unserved
            natural = start.copy()
            kind.fill(K_UNSERVED)
        else:
            cut = np.flatnonzero(service > give_up)
            natural = np.add(start, service, out=service)
            natural[cut] = start[cut] + give_up
            kind[cut] = K_CUT
        outcome = _DRAWN_OUTCOME[drawn]
        outcome[kind != K_NATURAL] = O_TIMEOUT
        return natural, kind, outcome, (drawn, ttft, generating)

    def _log(
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        start: np.ndarray,
        natural: np.ndarray,
        kind: np.ndarray,
        billing: tuple[np.ndarray, ...],
        cancel_at: np.ndarray,
        deadline: np.ndarray,
    ) -> None:
        """Record one call slot's calls for `rows` (deadline: their runs' deadlines)."""
        drawn, ttft, generating = billing
        provider, model = self.providers.index(plan.provider), self.models.index(plan.model)
        groups: list[tuple[np.ndarray | None, int]] = [(None, step.output_tokens)]
        if self._hard is not None and plan.model in self.hardness.effects:  # type: ignore[union-attr]
            groups = self.hardness.token_groups(  # type: ignore[union-attr]
                plan.model, self._hard[rows], step.output_tokens
            )
        for which, tokens in groups:  # a hard request's calls: their own (longer) answers
            part = (lambda a: a) if which is None else (lambda a, w=which: a[w])
            chunk = _Chunk(
                part(rows), step.index, attempt, provider, model, part(start), part(natural),
                part(kind), part(drawn), part(ttft), part(generating), part(cancel_at),
                part(deadline), step.input_tokens, tokens,
            )  # fmt: skip
            self.log.add(chunk)

    def _final(self, chunk: _Chunk, out: dict[str, np.ndarray]) -> None:
        """Write the final columns of a chunk's calls into `out`, no run closed early: a call
        that ran to its natural end follows from its drawn outcome alone (a lookup); the others
        (cancelled, cut) are settled as `_settle` does."""
        drawn = chunk.drawn
        price_in, price_out = self._prices[chunk.model]
        ins, outs = np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64)  # by drawn
        ins[[OK, INVALID]], outs[OK] = chunk.input_tokens, chunk.output_tokens
        out["end"][:] = chunk.natural
        out["ttft"][:] = chunk.ttft
        out["ttft"][drawn == ERROR] = np.nan
        np.take(_DRAWN_OUTCOME, drawn, out=out["outcome"])
        np.take(ins, drawn, out=out["billed_input"])
        np.take(outs, drawn, out=out["billed_output"])
        np.take(ins * price_in + outs * price_out, drawn, out=out["cost"])
        out["quota_tokens"].fill(chunk.input_tokens + chunk.output_tokens)
        out["ended_by"].fill(E_NONE)
        cancel_at = chunk.cancel_at
        cancelled = cancel_at < np.inf
        odd = chunk.kind != K_NATURAL  # cut at give-up or unserved
        if self.billing != "elapsed" and cancelled.any():
            # cancelled (by the deadline or as a loser): billed in full or not at all, so a
            # mask over the chunk does it, no gathers
            _select(out["end"], cancelled, cancel_at)
            _select(out["ttft"], cancelled, np.nan)
            _select(out["outcome"], cancelled, O_CANCELLED)
            _select(out["ended_by"], cancelled, E_LOSER)
            _select(out["ended_by"], cancelled & (cancel_at == chunk.deadline), E_DEADLINE)
            # billed only if it held its slot for some time (and billing is "full")
            free = cancelled if self.billing == "none" else cancelled & ~(cancel_at > chunk.start)
            for name in ("billed_input", "billed_output", "cost"):
                _select(out[name], free, 0)
            odd &= ~cancelled
        else:
            odd |= cancelled
        special = np.flatnonzero(odd)
        if len(special):
            settled = self._settle(
                {name: getattr(chunk, name)[special] for name in _RAW},
                np.int64(chunk.input_tokens), np.int64(chunk.output_tokens), price_in, price_out,
            )  # fmt: skip
            for name, values in settled.items():
                out[name][special] = values

    # ------------------------------------------------------------------ policies

    def _sequential(
        self,
        step: Step,
        plans: list[Attempt],
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """wait / cut / downshift: attempts one after another, the next at the previous end.
        A call still going at the deadline (or ending exactly at it) is cancelled there."""
        m, final = len(rows), len(plans) - 1
        last = np.zeros(m, np.int8)
        # The first attempt runs for every row (no gathers); `end` starts as its resolution,
        # a row that failed it being resolved again by a later attempt.
        natural, kind, outcome, billing = self._attempt(step, 0, plans[0], rows, start)
        cancelled = natural >= deadline
        cancel_at = np.where(cancelled, deadline, np.inf)
        self._log(step, 0, plans[0], rows, start, natural, kind, billing, cancel_at, deadline)
        won = ~cancelled & (outcome == O_OK)
        failed = ~cancelled & ~won
        state = np.zeros(m, np.int8)
        np.copyto(state, S_OK, where=won)
        np.copyto(state, S_DEADLINE, where=cancelled)
        end = np.minimum(natural, cancel_at)  # the deadline where cancelled (natural >= it)
        pos = np.flatnonzero(failed)
        if final == 0:
            state[pos], last[pos] = S_FAILED, outcome[pos]
            return _StepResult(state, end, last)
        t = natural[pos]  # the later attempts: rows `pos`, starting at `t`
        for k, plan in enumerate(plans[1:], start=1):
            if not len(pos):
                break
            its, dl = rows[pos], deadline[pos]
            natural, kind, outcome, billing = self._attempt(step, k, plan, its, t)
            cancelled = natural >= dl
            cancel_at = np.where(cancelled, dl, np.inf)
            self._log(step, k, plan, its, t, natural, kind, billing, cancel_at, dl)
            won = ~cancelled & (outcome == O_OK)
            failed = ~cancelled & ~won
            state[pos[cancelled]], end[pos[cancelled]] = S_DEADLINE, dl[cancelled]
            state[pos[won]], end[pos[won]] = S_OK, natural[won]
            if k == final:
                state[pos[failed]], end[pos[failed]] = S_FAILED, natural[failed]
                last[pos[failed]] = outcome[failed]
            pos, t = pos[failed], natural[failed]
        return _StepResult(state, end, last)

    def _race(
        self,
        step: Step,
        rounds: list[list[Attempt]],
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """race: rounds of attempts started together; the first valid answer wins, attempts
        ending at that same instant complete, later ones are cancelled; a round that fails
        starts the next as its last attempt ends."""
        m = len(rows)
        state, end, last = np.zeros(m, np.int8), np.full(m, np.nan), np.zeros(m, np.int8)
        pos: np.ndarray | None = None  # the rows still racing (None: all, the first round)
        its, at, dl, attempt = rows, start, deadline, 0
        for r, plans in enumerate(rounds):
            lives = [self._attempt(step, attempt + j, p, its, at) for j, p in enumerate(plans)]
            naturals, outcomes = [life[0] for life in lives], [life[2] for life in lives]
            first_ok = np.where(outcomes[0] == O_OK, naturals[0], np.inf)
            last_end = naturals[0]
            for natural, outcome in zip(naturals[1:], outcomes[1:], strict=True):
                np.minimum(first_ok, np.where(outcome == O_OK, natural, np.inf), out=first_ok)
                last_end = np.maximum(last_end, natural)
            any_ok = first_ok < np.inf
            round_end = np.where(any_ok, first_ok, last_end)
            hit = round_end >= dl
            won = any_ok & ~hit
            for j, plan in enumerate(plans):
                natural, kind, _, billing = lives[j]
                cancel_at = np.full(len(natural), np.inf)
                _select(cancel_at, won & (natural > first_ok), first_ok)  # losers: half, at random
                _select(cancel_at, hit & (natural >= dl), dl)
                self._log(step, attempt + j, plan, its, at, natural, kind, billing, cancel_at, dl)
            attempt += len(plans)
            if pos is None:
                np.copyto(state, S_DEADLINE, where=hit)
                np.copyto(end, dl, where=hit)
                np.copyto(state, S_OK, where=won)
                np.copyto(end, first_ok, where=won)
            else:
                state[pos[hit]], end[pos[hit]] = S_DEADLINE, dl[hit]
                state[pos[won]], end[pos[won]] = S_OK, first_ok[won]
            failed = np.flatnonzero(~any_ok & ~hit)
            lost = failed if pos is None else pos[failed]
            if r == len(rounds) - 1 and len(failed):
                # the reason is the outcome of the attempt that ended last (ties: started last)
                ends = np.stack([natural[failed] for natural in naturals])
                latest = len(plans) - 1 - np.argmax(ends[::-1], axis=0)
                reason = np.stack([outcome[failed] for outcome in outcomes])
                state[lost], end[lost] = S_FAILED, last_end[failed]
                last[lost] = reason[latest, np.arange(len(failed))]
            if not len(failed):
                break
            pos, at = lost, last_end[failed]
            its, dl = rows[pos], deadline[pos]
        return _StepResult(state, end, last)

    def _hedge(
        self,
        step: Step,
        plans: list[Attempt],
        delay: float,
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> _StepResult:
        """hedge: as `Hedge.execute`, wake-up by wake-up: the earliest of a pending call's end and
        the timer (re-armed at every wake-up as now + max(0, next_fire - now)); every call ending
        by then counts; a valid answer wins (the rest cancelled); otherwise the next hedge fires
        if none is pending or the fire time has come."""
        m, size = len(rows), len(plans)
        natural = np.full((m, size), np.inf)
        begun = np.full((m, size), np.nan)
        outcome = np.zeros((m, size), np.int8)
        kind = np.zeros((m, size), np.int8)
        drawn = np.zeros((m, size), np.int8)
        ttft = np.zeros((m, size))
        generating = np.zeros((m, size))
        cancel = np.full((m, size), np.inf)
        done = np.zeros((m, size), dtype=bool)
        fired = np.zeros(m, dtype=np.int64)

        def fire(pos: np.ndarray, at: np.ndarray) -> None:
            for c in np.unique(fired[pos]).tolist():
                group = fired[pos] == c
                p, when = pos[group], at[group]
                life = self._attempt(step, c, plans[c], rows[p], when)
                natural[p, c], kind[p, c], outcome[p, c] = life[0], life[1], life[2]
                drawn[p, c], ttft[p, c], generating[p, c] = life[3]
                begun[p, c] = when
                fired[p] = c + 1

        fire(np.arange(m), start)
        now, next_fire = start.copy(), start + delay
        state, end, last = np.zeros(m, np.int8), np.full(m, np.nan), np.zeros(m, np.int8)
        act = np.arange(m)
        slots = np.arange(size)
        while len(act):
            started = slots[None, :] < fired[act, None]
            pending = started & ~done[act]
            pending_end = np.where(pending, natural[act], np.inf).min(axis=1)
            timer = np.where(
                fired[act] < size,
                now[act] + np.maximum(0.0, next_fire[act] - now[act]),
                np.inf,
            )
            wake = np.minimum(pending_end, timer)
            dl = deadline[act]
            hit = wake >= dl
            gone = act[hit]
            cancel[gone] = np.where(pending[hit], dl[hit, None], cancel[gone])
            state[gone], end[gone] = S_DEADLINE, dl[hit]
            act, wake, pending = act[~hit], wake[~hit], pending[~hit]
            ended = pending & (natural[act] <= wake[:, None])
            done[act] |= ended
            won = (ended & (outcome[act] == O_OK)).any(axis=1)
            winners = act[won]
            still = pending & ~ended
            cancel[winners] = np.where(still[won], wake[won, None], cancel[winners])
            state[winners], end[winners] = S_OK, wake[won]
            act, wake, still = act[~won], wake[~won], still[~won]
            now[act] = wake
            waiting = still.any(axis=1)
            fires = (fired[act] < size) & (~waiting | (wake >= next_fire[act]))
            fire(act[fires], wake[fires])
            next_fire[act[fires]] = wake[fires] + delay
            over = ~waiting & ~fires
            lost = act[over]
            if len(lost):
                ends = np.where(slots[None, :] < fired[lost, None], natural[lost], -np.inf)
                latest = size - 1 - np.argmax(ends[:, ::-1], axis=1)
                state[lost], end[lost] = S_FAILED, wake[over]
                last[lost] = outcome[lost, latest]
            act = act[~over]
        for c, plan in enumerate(plans):
            p = np.flatnonzero(fired > c)
            self._log(
                step, c, plan, rows[p], begun[p, c], natural[p, c], kind[p, c],
                (drawn[p, c], ttft[p, c], generating[p, c]), cancel[p, c], deadline[p],
            )  # fmt: skip
        return _StepResult(state, end, last)

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

    def _finish_calls(
        self, closed_at: np.ndarray, failing: np.ndarray, deadline: np.ndarray
    ) -> tuple[CallArrays, np.ndarray]:
        """Apply every cancellation (deadline, race loser, hedge loser, a run failed by another
        branch), name what ended each call early (its `ended_by`, as the event engine's
        interrupt causes and policy cuts do) and bill each call as `Provider.call` does (with
        the deadline propagated, which qualifying requires). Also return the requests whose
        failure coincides with an event of another branch (a call ending or starting at that
        very instant): which came first is simpy's event order, so the event engine replays
        them."""
        col = self.log.columns(self._final)
        which = closed_at < np.inf
        if not which.any():
            return CallArrays(**col), np.zeros(0, dtype=np.int64)
        # only the calls of runs a failure closed early change: redo them from their lives
        at, raw = self.log.gather(which)
        request, start, natural = raw["request"], raw["start"], raw["natural"]
        closed = closed_at[request]
        other_branch = raw["step"] != failing[request]
        coincide = other_branch & (
            (start == closed) | (np.minimum(natural, raw["cancel_at"]) == closed)
        )
        unclear = np.unique(request[coincide])
        steps = self.workflow.steps
        input_tokens = np.asarray([s.input_tokens for s in steps], dtype=np.int64)[raw["step"]]
        output_tokens = raw["output_tokens"]  # the call's own (a hard request's may be longer)
        prices = np.asarray(self._prices, dtype=float).reshape(-1, 2)[raw["model"]]
        settled = self._settle(
            {name: raw[name] for name in _RAW},
            input_tokens, output_tokens, prices[:, 0], prices[:, 1], closed,
        )  # fmt: skip
        for name, values in settled.items():
            col[name][at] = values
        keep = start <= closed  # calls a failed run never started are dropped
        if not keep.all():
            kept = np.ones(len(col["request"]), dtype=bool)
            kept[at[~keep]] = False
            col = {name: values[kept] for name, values in col.items()}
        return CallArrays(**col), unclear

    def _settle(
        self,
        raw: dict[str, np.ndarray],
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        price_in: np.ndarray | float,
        price_out: np.ndarray | float,
        closed: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """The final columns of calls from their lives (`_RAW` fields), their runs closed at
        `closed` (None: never early): cancellations applied, `ended_by` named, billed."""
        start, natural, kind, drawn = raw["start"], raw["natural"], raw["kind"], raw["drawn"]
        cancel_at = raw["cancel_at"]
        by_deadline = cancel_at == raw["deadline"]  # else a loser's (before its deadline)
        if closed is None:
            in_flight = np.zeros(len(start), dtype=bool)
        else:
            in_flight = np.minimum(natural, cancel_at) > closed
            cancel_at = np.where(in_flight, closed, cancel_at)
        cancelled = cancel_at < np.inf
        end = np.where(cancelled, cancel_at, natural)
        outcome = np.where(
            cancelled,
            O_CANCELLED,
            np.where(kind == K_NATURAL, _DRAWN_OUTCOME[drawn], O_TIMEOUT),
        ).astype(np.int8)
        ended_by = np.select(
            [in_flight, cancelled & by_deadline, cancelled, kind != K_NATURAL],
            [E_RUN, E_DEADLINE, E_LOSER, E_ATTEMPT],
            E_NONE,
        ).astype(np.int8)
        ran = ~cancelled & (kind == K_NATURAL)
        billed_in = np.where(ran & (drawn != ERROR), input_tokens, 0).astype(np.int64)
        billed_out = np.where(ran & (drawn == OK), output_tokens, 0).astype(np.int64)
        # stopped after holding a slot for some time: cut at give-up, or cancelled
        stopped = (~cancelled & (kind == K_CUT)) | (cancelled & (end > start))
        cut_in, cut_out = self._bill_cut(
            drawn, raw["ttft"], raw["generating"], end - start, input_tokens, output_tokens
        )
        billed_in = np.where(stopped, cut_in, billed_in)
        billed_out = np.where(stopped, cut_out, billed_out)
        return {
            "end": end,
            "ttft": np.where(ran & (drawn != ERROR), raw["ttft"], np.nan),
            "outcome": outcome,
            "billed_input": billed_in,
            "billed_output": billed_out,
            "cost": billed_in * price_in + billed_out * price_out,
            "ended_by": ended_by,
        }

    def _replay(
        self,
        which: np.ndarray,
        arrival: np.ndarray,
        runs: dict[str, np.ndarray],
        calls: CallArrays,
    ) -> tuple[dict[str, np.ndarray], CallArrays]:
        """Run requests `which` through the event engine (on their own rows of the same draws:
        requests share nothing) and put their results in place of ours."""
        bank = _RowsBank(self.bank, which)
        sim = Simulation(
            self.scenario, self.policy, bank, bank.streams, self.deadline_s, self.latencies
        )
        records = sim.run(arrival[which])
        for run in records.runs:
            i = which[run.index]
            runs["ok"][i], runs["end"][i] = run.ok, run.end
            runs["fail_reason"][i], runs["fail_step"][i] = run.fail_reason, run.fail_step
        keep = ~np.isin(calls.request, which)
        step_index = {s.id: s.index for s in self.workflow.steps}
        theirs = records.calls
        replayed = {
            "request": which[np.asarray([c.run.index for c in theirs], dtype=np.int64)],
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
        }
        merged = {
            name: np.concatenate((getattr(calls, name)[keep], values))
            for name, values in replayed.items()
        }
        return runs, CallArrays(**merged)

    def _bill_cut(
        self,
        drawn: np.ndarray,
        ttft: np.ndarray,
        generating: np.ndarray,
        elapsed: np.ndarray,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`Provider._bill_cut` over arrays: (billed input, billed output)."""
        zero = np.zeros(len(drawn), dtype=np.int64)
        if self.billing == "none":
            return zero, zero
        billed_in = np.where(drawn != ERROR, input_tokens, 0)
        if self.billing == "full":
            return billed_in, np.where(drawn == OK, output_tokens, 0)
        positive = generating > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(
                positive,
                np.minimum(1.0, (elapsed - ttft) / np.where(positive, generating, 1.0)),
                1.0,
            )
        produced = (output_tokens * share).astype(np.int64)
        return billed_in, np.where((drawn == OK) & (elapsed > ttft), produced, 0)


# ---------------------------------------------------------------------------- helpers


def _select(out: np.ndarray, mask: np.ndarray, value: np.ndarray | float) -> None:
    """`out[mask] = value[mask]` (or `value`, a number) in place. Few rows go by index; many
    (a race's losers: half the rows, at random) by integer arithmetic on the bits, which has no
    per-row branch to mispredict and sets the very same bits."""
    count = np.count_nonzero(mask)
    if count * 16 < len(out):
        if count:
            rows = np.flatnonzero(mask)
            out[rows] = value if np.ndim(value) == 0 else value[rows]  # type: ignore[index]
        return
    kind = np.dtype(f"i{out.dtype.itemsize}")
    bits = out.view(kind)
    change = np.asarray(value, dtype=out.dtype).view(kind) - bits  # wraps around: exact
    change *= mask
    bits += change


def _transform(dist: Distribution, u: np.ndarray) -> np.ndarray:
    """`dist.from_uniform(u)` in a fresh array; a lognormal computed in place (the same
    operations, without their temporaries)."""
    if type(dist) is LogNormal:
        z = ndtri(u)
        z *= dist.sigma
        z += dist.mu
        return np.exp(z, out=z)
    return np.array(dist.from_uniform(u), dtype=float)


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
    scenario: Scenario,
    policy: Policy,
    bank: CallDrawBank,
    arrivals: np.ndarray,
    deadline_s: float | None = None,
    latencies: dict[tuple[str, str], CallLatency] | None = None,
    clocked: bool = False,
) -> tuple[dict[str, np.ndarray], CallArrays]:
    """One policy on all requests: (per-request columns, calls). Raises `UnsupportedError`.
    `clocked`: see `VectorizedSimulation.run`."""
    engine = VectorizedSimulation(scenario, policy, bank, deadline_s, latencies)
    _, runs, calls = engine.run(arrivals, clocked)
    return runs, calls


def tables(
    scenario: Scenario, policy: str, runs: dict[str, np.ndarray], calls: CallArrays
) -> VectorTables:
    """The requests and calls tables of `sim.analysis.metrics` (same columns, dtypes and row
    order)."""
    n = len(runs["arrival"])
    ids = np.asarray([s.id for s in scenario.workflow.steps], dtype=object)
    by_name = np.argsort(np.argsort(ids.astype(str)))  # step order as strings sort
    order, ordered = _call_order(calls, by_name)
    count = len(order)

    def strings(values: np.ndarray) -> pd.Series:
        return pd.Series(values, dtype="string")

    def named(names: Sequence[str], codes: np.ndarray) -> pd.Series:
        """`strings(names[codes])`, taken from the few names (no per-row string objects)."""
        return pd.Series(pd.array(np.asarray(names, dtype=object), dtype="string").take(codes))

    request = ordered["request"]
    call_table = pd.DataFrame(
        {
            "policy": named([policy], np.zeros(count, dtype=np.intp)),
            "request_id": request,
            "resend": np.zeros(count, dtype=np.int64),
            "step": named(ids, ordered["step"]),
            "attempt": ordered["attempt"].astype(np.int64),
            "provider": named(list(scenario.providers), calls.provider[order]),
            "model": named(list(scenario.models), calls.model[order]),
            "start_s": ordered["start"],
            "queue_s": np.zeros(count),
            "ttft_s": calls.ttft[order],
            "end_s": calls.end[order],
            "outcome": named(OUTCOMES, calls.outcome[order]),
            "input_tokens": calls.billed_input[order].astype(np.int64, copy=False),
            "output_tokens": calls.billed_output[order].astype(np.int64, copy=False),
            "cost_usd": calls.cost[order],
            "retry_after_s": np.full(count, math.nan),
            "quota_tokens": calls.quota_tokens[order].astype(np.int64, copy=False),
            "sdk_retry": np.zeros(count, dtype=np.int64),  # SDK retries are never vectorized
            "valid": np.ones(count, dtype=bool),  # no validator: junk is caught, never delivered
            "ended_by": named(ENDED_BY, calls.ended_by[order]),
            "orphan": np.zeros(count, dtype=bool),  # the deadline propagates (whitelisted)
        },
        columns=list(CALL_COLUMNS),
        copy=False,  # every column is a fresh array: no copy, no consolidating copy either
    )
    per_request = np.bincount(calls.request, minlength=n)
    cost = np.bincount(calls.request, weights=calls.cost, minlength=n)
    tokens = np.bincount(
        calls.request, weights=calls.billed_input + calls.billed_output, minlength=n
    )
    ok = runs["ok"]
    request_table = pd.DataFrame(
        {
            "policy": named([policy], np.zeros(n, dtype=np.intp)),
            "request_id": np.arange(n, dtype=np.int64),
            "resend": np.zeros(n, dtype=np.int64),
            "arrival_s": runs["arrival"].copy(),
            "latency_s": np.where(ok, runs["end"], runs["deadline"]) - runs["arrival"],
            "ok": ok.astype(bool),
            "cost_usd": cost,
            "tokens": np.rint(tokens).astype(np.int64),
            "calls": per_request.astype(np.int64),
            "end_s": runs["end"].copy(),
            "fail_reason": strings(runs["fail_reason"]),
            "fail_step": strings(runs["fail_step"]),
            "valid": ok.astype(bool),
            "quality": _delivered_quality(scenario, calls, ok, n),
            "valid_hit": ok.astype(bool),  # no validator and quality_floor 0 (whitelisted)
            "draft_kept": np.zeros(n, dtype=np.int64),
            "draft_upgraded": np.zeros(n, dtype=np.int64),
            "first_signal_s": _first_signal(calls, runs["arrival"], n),
            "refused_retries": np.zeros(n, dtype=np.int64),  # no admission (whitelisted)
            "refused_starts": np.zeros(n, dtype=np.int64),
        },
        columns=list(REQUEST_COLUMNS),
        copy=False,  # fresh arrays, as above
    )
    return VectorTables(request_table, call_table)


def _call_order(calls: CallArrays, by_name: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The calls table's row order: by request, start, step name (`by_name`: each step's rank),
    attempt; with the request, start, step and attempt columns in that order. The calls are
    logged step by step, each slot's rows in request order, so a stable sort by request alone
    usually gives it (a run's calls in time order); checked, else the full sort. Every
    (request, step, attempt) is one call, so the order is the same either way."""
    order = np.argsort(calls.request, kind="stable")
    names = ("request", "start", "step", "attempt")
    cols = {name: getattr(calls, name)[order] for name in names}
    request, start, attempt = cols["request"], cols["start"], cols["attempt"]
    rank = by_name.astype(np.int32)[cols["step"]]
    same_run = request[1:] == request[:-1]
    later = start[1:] > start[:-1]
    tied = start[1:] == start[:-1]
    after = (rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (attempt[1:] > attempt[:-1]))
    if np.all(~same_run | later | (tied & after)):
        return order, cols
    order = np.lexsort((calls.attempt, by_name[calls.step], calls.start, calls.request))
    return order, {name: getattr(calls, name)[order] for name in names}


def _first_signal(calls: CallArrays, arrival: np.ndarray, n: int) -> np.ndarray:
    """Per run, the event engine's `Run.first_signal`: from its arrival to the earliest first
    token of a call that answered ok (no call queues here); NaN without one."""
    answered = calls.outcome == O_OK
    request = calls.request[answered]
    first = np.full(n, np.inf)
    np.minimum.at(first, request, calls.start[answered] + calls.ttft[answered])
    return np.where(np.isfinite(first), first - arrival, np.nan)


def _delivered_quality(scenario: Scenario, calls: CallArrays, ok: np.ndarray, n: int) -> np.ndarray:
    """Per delivered run, the mean `quality` of the models whose answer each step kept (as the
    event engine's `Run.quality`: its last valid answer per step); NaN for a failed run."""
    quality = np.asarray([m.quality for m in scenario.models.values()], dtype=float)
    answered = np.flatnonzero(calls.outcome == O_OK)
    steps = len(scenario.workflow.steps)
    request, step = calls.request[answered], calls.step[answered]
    cell = step.astype(np.int64) * n + request  # (step, run)
    if not len(cell) or np.bincount(cell, minlength=steps * n).max() <= 1:
        # one valid answer per step and run at most (the usual case): it is the one kept; sum
        # per run in step order, as the sorted bincount below adds them
        kept = np.zeros((steps, n))
        kept[step, request] = quality[calls.model[answered]]
        total = np.zeros(n)
        for row in kept:
            total += row
        count = np.bincount(request, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), 1.0)
        return np.where(ok, mean, np.nan)
    # the answer a step kept is its valid call that ended last
    order = answered[
        np.lexsort((calls.end[answered], calls.step[answered], calls.request[answered]))
    ]
    keys = calls.request[order] * (len(scenario.workflow.steps) + 1) + calls.step[order]
    last = np.r_[keys[1:] != keys[:-1], True] if len(keys) else np.zeros(0, dtype=bool)
    kept = order[last]
    total = np.bincount(calls.request[kept], weights=quality[calls.model[kept]], minlength=n)
    count = np.bincount(calls.request[kept], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), 1.0)
    return np.where(ok, mean, np.nan)
