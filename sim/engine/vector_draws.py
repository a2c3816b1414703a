"""The vectorized engine's draws: one call slot's calls for many requests, lived uninterrupted.

`VectorDraws` is the part of `sim.engine.vectorized.VectorizedSimulation` that turns the draw
bank's uniforms (`CallDrawBank.uniforms`, the same named streams as the event engine) into a call
slot's first token, generation, stall and drawn outcome for a set of requests, transformed as
`CallLatency.draw` does and checked against it on the first rows of every slot (a changed law
must not go unseen), with a hard request's junk and longer answer; and then that slot's
uninterrupted life as `event_calls.serve` lives it with a free slot: its natural end, or its cut at
the policy's give-up. What cancels it and how it is billed is `sim.engine.vector_calls`; an
attempt on a provider whose client acts on its own (SDK retries, its timeout, overhead) is lived
by `sim.engine.vector_client` from the same draws (`sdk` > 0: the SDK retry's own block).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import ndtri

from sim.engine.kernel import SAME_INSTANT as _SAME_INSTANT
from sim.engine.vector_calls import (
    DRAWN_OUTCOME,
    K_CUT,
    K_NATURAL,
    K_UNSERVED,
    O_TIMEOUT,
    UnsupportedError,
)
from sim.engine.vector_streams import broken_services, place, stream_cut
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
from sim.model.stream import ONSET
from sim.model.streams import CallDrawBank
from sim.model.workflow import Step
from sim.policy.plans import Attempt

#: Rows of each draw block checked against `CallLatency.draw` itself (a changed law falls back).
_PROBE_ROWS = 16
#: A call slot needed by at most one request in this many draws only those requests' uniforms
#: (a jump and a draw per row costs about what drawing this many rows does).
_SPARSE_ROWS = 200


class VectorDraws:
    """A call slot's draws and uninterrupted life in the vectorized engine (a mixin of
    `VectorizedSimulation`)."""

    # The state this job reads, set by `VectorizedSimulation.__init__`.
    bank: CallDrawBank
    latencies: dict[tuple[str, str], CallLatency]
    hardness: Hardness | None
    _hard: np.ndarray | None
    _probed: set[tuple[str, int, str, str, int, int]]
    #: Per provider whose client acts on its own, what it does (`sim.engine.vector_client`),
    #: and an attempt on it lived (`VectorClient._client_attempt`).
    _clients: dict[str, object]
    _client_attempt: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, object]]
    #: Rows of a per-request stream of the bank (`VectorClient._stream`).
    _stream: Callable[[tuple[str | int, ...], np.ndarray], np.ndarray]

    def _draws(
        self, step: Step, attempt: int, plan: Attempt, rows: np.ndarray, sdk: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(first token, generation, which rows stall mid-stream, their stalls, drawn outcome,
        where each stream breaks (None: no breaks)) of this call slot (`sdk`: the SDK's retry
        number inside the attempt) for `rows`: the bank's uniforms transformed as
        `CallLatency.draw` does (checked against it), then placed in the stream as the event
        engine does (`sim.engine.vector_streams.place`) when the law has streams. Only the
        columns used are gathered, and only the stalled rows' extra."""
        latency = self.latencies[(plan.provider, plan.model)]
        block = self._uniforms(step.id, attempt, rows, sdk)
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
        key = (step.id, attempt, plan.provider, plan.model, step.output_tokens, sdk)
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
        broken_at = None
        if latency.streams:  # a stall before the first token, a mid-stream break

            def uniform(name: str) -> np.ndarray:
                return self._stream((name, step.id, attempt, 0, sdk), rows)

            stalled, extra, broken_at = place(latency, uniform, ttft, stalled, extra, drawn)
        return ttft, generation, stalled, extra, drawn, broken_at

    def _call_stream(
        self, step: Step, attempt: int, plan: Attempt, rows: np.ndarray, sdk: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
        """This call slot's stream for `rows` (None when its law has no stalls and no breaks):
        generation without the stall, the mid-stream stall (0: none), its onset share (NaN:
        none), from the onset's own stream (`sim.model.stream.ONSET`) as the event engine draws
        it, and where each stream breaks (None: no breaks)."""
        latency = self.latencies[(plan.provider, plan.model)]
        stalls = latency.stall_extra is not None and latency.stall_probability > 0
        if not stalls and not latency.break_rate > 0:
            return None
        _, generation, stalled, extra, _, broken_at = self._draws(step, attempt, plan, rows, sdk)
        stall = np.zeros(len(rows))
        stall[stalled] = extra
        return generation, stall, self._onsets(step, attempt, rows, stalled, sdk), broken_at

    def _onsets(
        self, step: Step, attempt: int, rows: np.ndarray, stalled: np.ndarray, sdk: int = 0
    ) -> np.ndarray:
        """The onset share of each mid-stream stall of this call slot for `rows` (NaN where
        `stalled` does not say it stalls), from the onset's own stream."""
        onset = np.full(len(rows), np.nan)
        if len(stalled):
            column = self.bank.uniform_column((ONSET, step.id, attempt, 0, sdk))
            onset[stalled] = np.asarray(column)[rows[stalled]]
        return onset

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

    def _uniforms(self, step: str, attempt: int, rows: np.ndarray, sdk: int = 0) -> np.ndarray:
        """The bank's uniform block of this call slot, or only its rows `rows` (in their order)
        when they are few: drawn from the same stream, jumping over the rows not needed
        (`_SPARSE_ROWS`), as the bank would draw the whole block. Checked for each slot
        against a two-row bank of the same streams; otherwise the bank's block."""
        bank = self.bank
        if type(bank) is not CallDrawBank or len(rows) * _SPARSE_ROWS > bank.n_requests:
            return bank.uniforms(step, attempt, 0, sdk)
        generator = bank.streams.generator("call", step, attempt, 0, *(("sdk", sdk) if sdk else ()))
        bits = generator.bit_generator
        if not isinstance(bits, np.random.PCG64):
            return bank.uniforms(step, attempt, 0, sdk)
        bits.advance(bank.first * UNIFORMS_PER_CALL)  # a chunk's bank starts at request `first`
        check = CallDrawBank(bank.streams, 2, bank.first).uniforms(step, attempt, 0, sdk)
        if not np.array_equal(generator.random(check.shape), check):
            return bank.uniforms(step, attempt, 0, sdk)
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
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        start: np.ndarray,
        deadline: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
        """One policy attempt started at `start`, uninterrupted: on a plain provider one call
        (as `event_calls.serve` with a free slot): (natural end, kind, outcome code, (drawn, ttft,
        generating) for billing); on a provider whose client acts on its own, its calls and
        sleeps (`VectorClient._client_attempt`, which reads the runs' `deadline`)."""
        if plan.provider in self._clients:
            return self._client_attempt(step, attempt, plan, rows, start, deadline)
        ttft, generation, stalled, extra, drawn, broken_at = self._draws(step, attempt, plan, rows)
        streaming = broken_at is not None or plan.first_token_after is not None
        if streaming or plan.idle_after is not None:  # its stream matters: its own path
            return self._stream_attempt(
                step, attempt, plan, rows, start, (ttft, generation, stalled, extra, drawn),
                broken_at,
            )  # fmt: skip
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
        outcome = DRAWN_OUTCOME[drawn]
        outcome[kind != K_NATURAL] = O_TIMEOUT
        return natural, kind, outcome, (drawn, ttft, generating)

    def _stream_attempt(
        self,
        step: Step,
        attempt: int,
        plan: Attempt,
        rows: np.ndarray,
        start: np.ndarray,
        draws: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        broken_at: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, object]:
        """`_attempt` for a call slot whose stream matters (a break, a stream cut): a broken
        call served to its break, each call cut at the first of its give-up and its stream cuts
        (`sim.engine.vector_streams`), as `serve` lives it with a free slot."""
        ttft, generation, stalled, extra, drawn = draws
        onset = self._onsets(step, attempt, rows, stalled)
        service = ttft + generation
        if len(stalled):
            service[stalled] += extra
        np.copyto(service, ttft, where=drawn != OK)
        if broken_at is not None:
            broke, at_break = broken_services(
                ttft, generation, stalled, extra, onset, drawn, broken_at
            )
            service[broke] = at_break
        give_up = plan.give_up_after
        left = np.full(len(rows), np.inf if give_up is None else give_up - 0.0)
        stall = np.zeros(len(rows))
        stall[stalled] = extra
        left, label = stream_cut(
            left, ttft, generation, stall, onset, drawn, broken_at, plan.first_token_after,
            plan.idle_after,
        )  # fmt: skip
        natural, kind = _cut_lives(start, service, left, label)
        generating = generation + stall
        outcome = DRAWN_OUTCOME[drawn]
        outcome[kind != K_NATURAL] = O_TIMEOUT
        return natural, kind, outcome, (drawn, ttft, generating)


def _transform(dist: Distribution, u: np.ndarray) -> np.ndarray:
    """`dist.from_uniform(u)` in a fresh array; a lognormal computed in place (the same
    operations, without their temporaries)."""
    if type(dist) is LogNormal and math.isinf(dist.upper):
        z = ndtri(u)
        z *= dist.sigma
        z += dist.mu
        return np.exp(z, out=z)
    return np.array(dist.from_uniform(u), dtype=float)


def _cut_lives(
    start: np.ndarray,
    service: np.ndarray,
    left: np.ndarray,
    label: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(the end, the kind) of calls sent at `start` needing `service` seconds, cut `left`
    seconds after their send (inf: never) by what `label` says (0: their give-up), as `serve`
    ends them with a free slot. A stream cut at the send itself is left to the event engine."""
    unserved = left <= _SAME_INSTANT
    if (unserved & (label != 0)).any():
        raise UnsupportedError("a stream cut at the instant a call is sent")
    cut = ~(service <= left)
    natural = np.where(cut, start + left, start + service)
    kind = np.where(cut, np.where(label != 0, label, K_CUT), 0).astype(np.int8)
    natural[unserved] = start[unserved]
    kind[unserved] = K_UNSERVED
    return natural, kind
