"""The vectorized engine's calls as columns: their codes, the call log, and how each is settled.

A call slot (step, attempt) is computed for many requests at once as an uninterrupted life (see
`sim.engine.vector_draws`); this module owns what becomes of those lives: the integer codes of
the `outcome`, `ended_by` and end-kind columns, `CallArrays` (every call as columns), the call log
(one `_Chunk` per call slot and set of requests) and `VectorCalls`, the part of
`sim.engine.vectorized.VectorizedSimulation` that records a slot's calls and finishes them:
every cancellation applied (deadline, race or hedge loser, a run failed by another branch),
what ended each call named, and each call billed as `event_calls.serve` bills it. A call of a
provider whose client acts on its own (SDK retries, its timeout, overhead:
`sim.engine.vector_client`) is a `ClientChunk`, settled by `_settle_client` (its overhead's
after part kept apart). It also holds `UnsupportedError`, which every part of the vectorized
engine raises when it cannot reproduce a case (the event engine then runs it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.engine.vector_streams import K_FIRST, K_IDLE, bill_broken, broken_ran
from sim.model.hardness import Hardness
from sim.model.latency import BROKEN, ERROR, INVALID, OK
from sim.model.rows import (
    OUTCOME_BROKEN,
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    OUTCOMES,
)
from sim.model.stream import streamed_shares
from sim.model.workflow import Step, Workflow
from sim.policy.deadlines import (
    BY_ATTEMPT,
    BY_DEADLINE,
    BY_IDLE,
    BY_LOSER,
    BY_RUN,
    BY_SDK,
    BY_TTFT,
    ENDED_BY,
)
from sim.policy.plans import Attempt

# Outcome codes: indices into OUTCOMES (the `outcome` column).
O_OK, O_INVALID, O_ERROR = (OUTCOMES.index(o) for o in (OUTCOME_OK, OUTCOME_INVALID, OUTCOME_ERROR))
O_TIMEOUT, O_CANCELLED = OUTCOMES.index(OUTCOME_TIMEOUT), OUTCOMES.index(OUTCOME_CANCELLED)
O_BROKEN = OUTCOMES.index(OUTCOME_BROKEN)
#: Drawn outcome (sim.model.latency OK / ERROR / INVALID / BROKEN) -> outcome code of a call that
#: ran to its end.
DRAWN_OUTCOME = np.zeros(4, dtype=np.int8)
DRAWN_OUTCOME[[OK, ERROR, INVALID, BROKEN]] = [O_OK, O_ERROR, O_INVALID, O_BROKEN]
# What ended a call early: indices into ENDED_BY (the `ended_by` column; "" ended on its own).
E_NONE, E_ATTEMPT, E_DEADLINE, E_LOSER, E_RUN, E_SDK, E_TTFT, E_IDLE = (
    ENDED_BY.index(e)
    for e in ("", BY_ATTEMPT, BY_DEADLINE, BY_LOSER, BY_RUN, BY_SDK, BY_TTFT, BY_IDLE)
)

# How a call's uninterrupted life ends (before any cancellation).
K_NATURAL, K_CUT, K_UNSERVED = 0, 1, 2  # ran to its end / cut at give-up / cut as it got a slot
K_LATE = 3  # served, then cut while its overhead's after part ran (a client's call only)
# K_FIRST, K_IDLE (4, 5): cut by a cut that watches the stream (`sim.engine.vector_streams`).


class UnsupportedError(Exception):
    """The vectorized engine cannot reproduce this case; the event engine must run it."""


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
    tokens_streamed: np.ndarray  # int64 output tokens of its answer received before its end
    #: int64 SDK retry (0: the policy's call) and the call's overhead seconds; None: every
    #: call 0 (no provider's client acts on its own)
    sdk_retry: np.ndarray | None = None
    overhead: np.ndarray | None = None


@dataclass
class _Chunk:
    """The calls of one call slot (step, attempt) for some requests, as lived uninterrupted
    but for the policy's and the deadline's cancellations; `CallLog.columns` finishes them."""

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
    #: Its stream (`sim.model.stream`), None without stalls or breaks: generation without the
    #: stall, the stall (0: none), its onset (a share of the tokens; NaN: none) and where the
    #: stream breaks (a share; NaN: none; None: no call of the chunk breaks).
    stream: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None


@dataclass
class ClientChunk(_Chunk):
    """The calls of one SDK retry `sdk` of a call slot, on a provider whose client acts on its
    own (`sim.engine.vector_client`), those never made (sent after their attempt's
    cancellation) left out: `natural` is when the caller sees its end (after the overhead's
    after part), `served` when the provider is done with it (the slot is freed), `cancel_at`
    the call's own cancellation (inf: none) and `late` whether that lands in the after part
    (billed as served); `by_sdk` a cut is the client's timeout; `tail` the attempt's end where
    the client slept past this, its last call (NaN otherwise)."""

    sdk: int = 0
    served: np.ndarray = field(default_factory=lambda: np.zeros(0))
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    by_sdk: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    overhead: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tail: np.ndarray = field(default_factory=lambda: np.zeros(0))


#: Raw fields of a chunk that `VectorCalls._settle` reads (and, of a client's, `_settle_client`).
_RAW = ("start", "natural", "kind", "drawn", "ttft", "generating", "cancel_at", "deadline")
_CLIENT_RAW = (*_RAW, "served", "late", "by_sdk", "tail")
_DTYPES = {
    "request": np.int64, "step": np.int32, "attempt": np.int32, "provider": np.int32,
    "model": np.int32, "start": float, "end": float, "ttft": float, "outcome": np.int8,
    "billed_input": np.int64, "billed_output": np.int64, "cost": float,
    "quota_tokens": np.int64, "ended_by": np.int8, "tokens_streamed": np.int64,
}  # fmt: skip
#: Raw fields of a chunk's stream (`_Chunk.stream`), as `_settle` reads them.
_STREAM = ("generation", "stall", "onset", "broken_at")


def stream_fields(chunk: _Chunk, which: np.ndarray | slice) -> dict[str, np.ndarray]:
    """A chunk's stream fields (`_STREAM`) at `which`: without stalls, its `generating`, no
    stall and no onset; without breaks no `broken_at` (read as none: `broken_ran`)."""
    if chunk.stream is not None:
        generation, stall, onset, broken_at = chunk.stream
        fields = {"generation": generation[which], "stall": stall[which], "onset": onset[which]}
        if broken_at is not None:
            fields["broken_at"] = broken_at[which]
        return fields
    generation = chunk.generating[which]
    return {
        "generation": generation,
        "stall": np.zeros(len(generation)),
        "onset": np.full(len(generation), np.nan),
    }


#: The columns a clients' chunk adds (`CallArrays.sdk_retry`, `.overhead`).
_CLIENT_DTYPES = {"sdk_retry": np.int64, "overhead": float}


class CallLog:
    """Calls as they are computed, one chunk per call slot and set of requests."""

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []
        #: A client's chunk was logged: the columns carry `sdk_retry` and `overhead`.
        self.client = False

    def add(self, chunk: _Chunk) -> None:
        self.chunks.append(chunk)
        if isinstance(chunk, ClientChunk):
            self.client = True

    def columns(
        self, final: Callable[[_Chunk, dict[str, np.ndarray]], None]
    ) -> dict[str, np.ndarray]:
        """Every CallArrays column over all chunks, in chunk order: each chunk's slice written
        in place by `final(chunk, its slices)` (no per-chunk temporaries to concatenate)."""
        total = sum(len(c.rows) for c in self.chunks)
        dtypes = (_DTYPES | _CLIENT_DTYPES) if self.client else _DTYPES
        out = {name: np.empty(total, dtype=dtype) for name, dtype in dtypes.items()}
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
            if self.client:
                client = isinstance(c, ClientChunk)
                part["sdk_retry"].fill(c.sdk if client else 0)  # type: ignore[attr-defined]
                part["overhead"][:] = c.overhead if client else 0.0  # type: ignore[attr-defined]
            final(c, part)
            offset = k
        return out

    def gather(
        self, which: np.ndarray, client: bool = False
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(positions in `columns()`, raw fields plus request, step and model) of the calls of
        the requests where `which` (a boolean per request) is true: of the plain chunks, or
        (`client`) of the clients' chunks with their own fields too."""
        positions, parts, offset = [], [], 0
        names = _CLIENT_RAW if client else _RAW
        for c in self.chunks:
            local = np.flatnonzero(which[c.rows]) if isinstance(c, ClientChunk) == client else ()
            if len(local):
                positions.append(local + offset)
                part = {name: getattr(c, name)[local] for name in names}
                part.update(stream_fields(c, local))
                part["request"] = c.rows[local]
                for name in ("step", "model", "output_tokens"):
                    part[name] = np.full(len(local), getattr(c, name), dtype=np.int64)
                parts.append(part)
            offset += len(c.rows)
        if not parts:
            return np.zeros(0, dtype=np.int64), {}
        if any("broken_at" in p for p in parts):  # some chunks break: none elsewhere
            for p in parts:
                p.setdefault("broken_at", np.full(len(p["request"]), np.nan))
        fields = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        return np.concatenate(positions), fields


class VectorCalls:
    """The calls' log and settlement in the vectorized engine (a mixin of
    `VectorizedSimulation`)."""

    # The state this job reads, set by `VectorizedSimulation.__init__`.
    workflow: Workflow
    providers: list[str]
    models: list[str]
    billing: str
    log: CallLog
    _prices: list[tuple[float, float]]
    hardness: Hardness | None
    _hard: np.ndarray | None
    #: A client's attempt logged (`sim.engine.vector_client.VectorClient._client_log`).
    _client_log: Callable[..., None]
    #: A call slot's stream for some rows (`sim.engine.vector_draws.VectorDraws._call_stream`).
    _call_stream: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, Any] | None]

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
        """Record one call slot's calls for `rows` (deadline: their runs' deadlines). A client's
        attempt (its `billing` a `ClientLife`, not the plain tuple) logs its own calls."""
        if not isinstance(billing, tuple):
            self._client_log(step, attempt, plan, rows, billing, cancel_at, deadline)
            return
        drawn, ttft, generating = billing
        provider, model = self.providers.index(plan.provider), self.models.index(plan.model)
        groups: list[tuple[np.ndarray | None, int]] = [(None, step.output_tokens)]
        if self._hard is not None and plan.model in self.hardness.effects:  # type: ignore[union-attr]
            groups = self.hardness.token_groups(  # type: ignore[union-attr]
                plan.model, self._hard[rows], step.output_tokens
            )
        stream = self._call_stream(step, attempt, plan, rows)
        for which, tokens in groups:  # a hard request's calls: their own (longer) answers
            part = (lambda a: a) if which is None else (lambda a, w=which: a[w])
            chunk = _Chunk(
                part(rows), step.index, attempt, provider, model, part(start), part(natural),
                part(kind), part(drawn), part(ttft), part(generating), part(cancel_at),
                part(deadline), step.input_tokens, tokens,
                None if stream is None else tuple(None if a is None else part(a) for a in stream),  # type: ignore[arg-type]
            )  # fmt: skip
            self.log.add(chunk)

    def _final(self, chunk: _Chunk, out: dict[str, np.ndarray]) -> None:
        """Write the final columns of a chunk's calls into `out`, no run closed early: a call
        that ran to its natural end follows from its drawn outcome alone (a lookup); the others
        (cancelled, cut) are settled as `_settle` does, a client's as `_settle_client` does."""
        drawn = chunk.drawn
        price_in, price_out = self._prices[chunk.model]
        ins, outs = np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64)  # by drawn
        ins[[OK, INVALID]], outs[OK] = chunk.input_tokens, chunk.output_tokens
        if self.billing != "none":  # a broken stream: billed as a call cut where it broke
            ins[BROKEN] = chunk.input_tokens
            outs[BROKEN] = chunk.output_tokens if self.billing == "full" else 0
        out["end"][:] = chunk.natural
        out["ttft"][:] = chunk.ttft
        out["ttft"][drawn == ERROR] = np.nan
        np.take(DRAWN_OUTCOME, drawn, out=out["outcome"])
        np.take(ins, drawn, out=out["billed_input"])
        np.take(outs, drawn, out=out["billed_output"])
        np.take(ins * price_in + outs * price_out, drawn, out=out["cost"])
        out["quota_tokens"].fill(chunk.input_tokens + chunk.output_tokens)
        out["ended_by"].fill(E_NONE)
        np.take(outs, drawn, out=out["tokens_streamed"])
        if chunk.stream is not None and chunk.stream[3] is not None:
            broke = np.flatnonzero(drawn == BROKEN)
            bill_broken(self.billing, chunk.stream[3], broke, chunk.output_tokens, out,
                        ins[BROKEN] * price_in, price_out)  # fmt: skip
        cancel_at = chunk.cancel_at
        cancelled = cancel_at < np.inf
        odd = chunk.kind != K_NATURAL  # cut at give-up or unserved (or in an after part)
        client = isinstance(chunk, ClientChunk)
        if self.billing != "elapsed" and cancelled.any() and not client:
            # cancelled (by the deadline or as a loser): billed in full or not at all, so a
            # mask over the chunk does it, no gathers
            put_masked(out["end"], cancelled, cancel_at)
            put_masked(out["ttft"], cancelled, np.nan)
            put_masked(out["outcome"], cancelled, O_CANCELLED)
            put_masked(out["ended_by"], cancelled, E_LOSER)
            put_masked(out["ended_by"], cancelled & (cancel_at == chunk.deadline), E_DEADLINE)
            # billed only if it held its slot for some time (and billing is "full")
            free = cancelled if self.billing == "none" else cancelled & ~(cancel_at > chunk.start)
            for name in ("billed_input", "billed_output", "cost"):
                put_masked(out[name], free, 0)
            gone = np.flatnonzero(cancelled)
            if len(gone):  # what they streamed by their cancellation
                fields = stream_fields(chunk, gone)
                out["tokens_streamed"][gone] = _streamed(
                    drawn[gone], chunk.ttft[gone], cancel_at[gone] - chunk.start[gone],
                    fields, np.int64(chunk.output_tokens),
                )  # fmt: skip
            odd &= ~cancelled
        else:
            odd |= cancelled
        special = np.flatnonzero(odd)
        if len(special):
            settle, names = (self._settle_client, _CLIENT_RAW) if client else (self._settle, _RAW)
            raw = {name: getattr(chunk, name)[special] for name in names}
            raw.update(stream_fields(chunk, special))
            settled = settle(
                raw, np.int64(chunk.input_tokens), np.int64(chunk.output_tokens), price_in,
                price_out,
            )  # fmt: skip
            for name, values in settled.items():
                out[name][special] = values

    def _finish_calls(
        self, closed_at: np.ndarray, failing: np.ndarray, deadline: np.ndarray
    ) -> tuple[CallArrays, np.ndarray]:
        """Apply every cancellation (deadline, race loser, hedge loser, a run failed by another
        branch), name what ended each call early (its `ended_by`, as the event engine's
        interrupt causes and policy cuts do) and bill each call as `event_calls.serve` does (with
        the deadline propagated, which qualifying requires). Also return the requests whose
        failure coincides with an event of another branch (a call ending or starting at that
        very instant, a client's call freeing its slot or its sleep ending then): which came
        first is simpy's event order, so the event engine replays them."""
        col = self.log.columns(self._final)
        which = closed_at < np.inf
        if not which.any():
            return CallArrays(**col), np.zeros(0, dtype=np.int64)
        # only the calls of runs a failure closed early change: redo them from their lives
        unclear, dropped = [], []
        for client in (False, True) if self.log.client else (False,):
            at, raw = self.log.gather(which, client)
            if not len(at):
                continue
            request, start, natural = raw["request"], raw["start"], raw["natural"]
            closed = closed_at[request]
            other_branch = raw["step"] != failing[request]
            events = (start == closed) | (np.minimum(natural, raw["cancel_at"]) == closed)
            if client:
                events |= (raw["served"] == closed) | (raw["tail"] == closed)
            unclear.append(request[other_branch & events])
            steps = self.workflow.steps
            input_tokens = np.asarray([s.input_tokens for s in steps], dtype=np.int64)[raw["step"]]
            output_tokens = raw["output_tokens"]  # the call's own (a hard request's may be longer)
            prices = np.asarray(self._prices, dtype=float).reshape(-1, 2)[raw["model"]]
            settle = self._settle_client if client else self._settle
            settled = settle(
                {name: raw[name] for name in (*(_CLIENT_RAW if client else _RAW), *_STREAM)
                 if name in raw},
                input_tokens, output_tokens, prices[:, 0], prices[:, 1], closed,
            )  # fmt: skip
            for name, values in settled.items():
                col[name][at] = values
            dropped.append(at[start > closed])  # calls a failed run never started
        drop = np.concatenate(dropped) if dropped else np.zeros(0, dtype=np.int64)
        if len(drop):
            kept = np.ones(len(col["request"]), dtype=bool)
            kept[drop] = False
            col = {name: values[kept] for name, values in col.items()}
        found = np.concatenate(unclear) if unclear else np.zeros(0, dtype=np.int64)
        return CallArrays(**col), np.unique(found)

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
            np.where(kind == K_NATURAL, DRAWN_OUTCOME[drawn], O_TIMEOUT),
        ).astype(np.int8)
        ended_by = np.select(
            [
                in_flight, cancelled & by_deadline, cancelled, kind == K_FIRST, kind == K_IDLE,
                kind != K_NATURAL,
            ],
            [E_RUN, E_DEADLINE, E_LOSER, E_TTFT, E_IDLE, E_ATTEMPT],
            E_NONE,
        ).astype(np.int8)  # fmt: skip
        ran = ~cancelled & (kind == K_NATURAL)
        billed_in = np.where(ran & (drawn != ERROR), input_tokens, 0).astype(np.int64)
        billed_out = np.where(ran & (drawn == OK), output_tokens, 0).astype(np.int64)
        whole = np.where(ran & (drawn == OK), output_tokens, 0)
        billed_in, billed_out, whole = broken_ran(
            self.billing, ran, drawn, raw.get("broken_at"), input_tokens, output_tokens,
            (billed_in, billed_out, whole),
        )  # fmt: skip
        # stopped after holding a slot for some time: cut at give-up or on its stream, or
        # cancelled
        stopped = (~cancelled & ((kind == K_CUT) | (kind >= K_FIRST))) | (cancelled & (end > start))
        streamed = _streamed(drawn, raw["ttft"], end - start, raw, output_tokens)
        cut_in, cut_out = self._bill_cut(drawn, streamed, input_tokens, output_tokens)
        billed_in = np.where(stopped, cut_in, billed_in)
        billed_out = np.where(stopped, cut_out, billed_out)
        return {
            "tokens_streamed": np.where(stopped, streamed, whole).astype(np.int64),
            "end": end,
            "ttft": np.where(ran & (drawn != ERROR), raw["ttft"], np.nan),
            "outcome": outcome,
            "billed_input": billed_in,
            "billed_output": billed_out,
            "cost": billed_in * price_in + billed_out * price_out,
            "ended_by": ended_by,
        }

    def _settle_client(
        self,
        raw: dict[str, np.ndarray],
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        price_in: np.ndarray | float,
        price_out: np.ndarray | float,
        closed: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """`_settle` for a client's calls (`ClientChunk` fields): a cut by the client's timeout
        is `ended_by` sdk; a call cancelled or cut in its overhead's after part, the provider
        done with it, is billed as served and keeps its first token (as `event_calls._late`)."""
        start, natural, served, kind = raw["start"], raw["natural"], raw["served"], raw["kind"]
        drawn, cancel_at, late = raw["drawn"], raw["cancel_at"], raw["late"]
        by_deadline = cancel_at == raw["deadline"]  # else a loser's (before its deadline)
        if closed is None:
            in_flight = np.zeros(len(start), dtype=bool)
        else:  # still going when its run closed (the instant itself is replayed: coincides)
            in_flight = np.minimum(natural, cancel_at) > closed
            cancel_at = np.where(in_flight, closed, cancel_at)
            late = np.where(in_flight, served < closed, late)
        cancelled = cancel_at < np.inf
        end = np.where(cancelled, cancel_at, natural)
        served_whole = ((kind == K_NATURAL) | (kind == K_LATE)) & (~cancelled | late)
        outcome = np.where(
            cancelled,
            O_CANCELLED,
            np.where(kind == K_NATURAL, DRAWN_OUTCOME[drawn], O_TIMEOUT),
        ).astype(np.int8)
        cut = kind != K_NATURAL
        ended_by = np.select(
            [
                in_flight, cancelled & by_deadline, cancelled, cut & raw["by_sdk"],
                kind == K_FIRST, kind == K_IDLE, cut,
            ],
            [E_RUN, E_DEADLINE, E_LOSER, E_SDK, E_TTFT, E_IDLE, E_ATTEMPT],
            E_NONE,
        ).astype(np.int8)  # fmt: skip
        billed_in = np.where(served_whole & (drawn != ERROR), input_tokens, 0).astype(np.int64)
        billed_out = np.where(served_whole & (drawn == OK), output_tokens, 0).astype(np.int64)
        whole = np.where(served_whole & (drawn == OK), output_tokens, 0)
        billed_in, billed_out, whole = broken_ran(
            self.billing, served_whole, drawn, raw.get("broken_at"), input_tokens, output_tokens,
            (billed_in, billed_out, whole),
        )  # fmt: skip
        # stopped in service after holding its slot for some time: cut there (at give-up or on
        # its stream), or cancelled
        stopped = (~cancelled & ((kind == K_CUT) | (kind >= K_FIRST))) | (
            cancelled & ~late & (end > start)
        )
        streamed = _streamed(drawn, raw["ttft"], end - start, raw, output_tokens)
        cut_in, cut_out = self._bill_cut(drawn, streamed, input_tokens, output_tokens)
        billed_in = np.where(stopped, cut_in, billed_in)
        billed_out = np.where(stopped, cut_out, billed_out)
        return {
            "tokens_streamed": np.where(stopped, streamed, whole).astype(np.int64),
            "end": end,
            "ttft": np.where(served_whole & (drawn != ERROR), raw["ttft"], np.nan),
            "outcome": outcome,
            "billed_input": billed_in,
            "billed_output": billed_out,
            "cost": billed_in * price_in + billed_out * price_out,
            "ended_by": ended_by,
        }

    def _bill_cut(
        self,
        drawn: np.ndarray,
        streamed: np.ndarray,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`event_calls._bill_cut` over arrays, given what each call streamed (`_streamed`):
        (billed input, billed output)."""
        zero = np.zeros(len(drawn), dtype=np.int64)
        if self.billing == "none":
            return zero, zero
        billed_in = np.where(drawn != ERROR, input_tokens, 0)
        if self.billing == "full":
            return billed_in, np.where((drawn == OK) | (drawn == BROKEN), output_tokens, 0)
        return billed_in, streamed


def _streamed(
    drawn: np.ndarray,
    ttft: np.ndarray,
    elapsed: np.ndarray,
    stream: dict[str, np.ndarray],
    output_tokens: np.ndarray,
) -> np.ndarray:
    """The output tokens each call stopped `elapsed` seconds into its service had received
    (`sim.model.stream.streamed_shares`; none before its first token, none of junk or errors)."""
    x = elapsed - ttft
    share = streamed_shares(x, stream["generation"], stream["stall"], stream["onset"])
    produced = (output_tokens * share).astype(np.int64)
    return np.where(((drawn == OK) | (drawn == BROKEN)) & (elapsed > ttft), produced, 0)


def put_masked(out: np.ndarray, mask: np.ndarray, value: np.ndarray | float) -> None:
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
