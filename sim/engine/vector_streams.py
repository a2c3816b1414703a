"""The vectorized engine's streams: a stall's place, a mid-stream break, the cuts that watch them.

Per call as `event_calls.CallMaker._prepare` draws them and `event_serve.serve` (with a free
slot) lives them, over arrays with the same float operations in the same order, so that the
engines agree to the last bit: a stall placed before the first token delays it (`stall.where`,
the 'stall-place' stream when it is a share); an answer breaks mid-stream (the 'break' and
'break-at' streams, `mid_stream_error_rate`) and its service ends at its break
(`sim.model.stream.times_to_shares`); the cuts that watch the stream (`first_token_timeout_s`,
`idle_timeout_s`: `event_serve._stream_cut`) end a call sooner than its give-up. Only a plan
that uses them reaches this code (`CallLatency.streams`, an attempt's stream cuts), so every
other scenario runs as before, bit for bit and at the same speed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.model.latency import BROKEN, OK, CallLatency
from sim.model.stream import BREAK, BREAK_AT, PLACE, times_to_shares

#: How a call's uninterrupted life ends, beyond `sim.engine.vector_calls`' K_* codes: cut by a
#: cut that watches the stream, no first token in time or a mid-stream stall longer than the
#: idle timeout (`ended_by` first_token / idle).
K_FIRST, K_IDLE = 4, 5
#: A per-request stream of this call slot for its rows, by name (`sim.model.stream`).
Uniform = Callable[[str], np.ndarray]


def place(
    latency: CallLatency,
    uniform: Uniform,
    ttft: np.ndarray,
    stalled: np.ndarray,
    extra: np.ndarray,
    drawn: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A call slot's stream, in place on `ttft` and `drawn` as `CallMaker._prepare` does: a
    stall placed before the first token added to it; an answer whose stream breaks marked
    BROKEN. Returns (the rows stalled mid-stream, their stalls, where each stream breaks as a
    share of its tokens (NaN: it does not) or None without breaks)."""
    before = latency.stall_before
    if len(stalled) and before > 0:
        first = np.ones(len(stalled), dtype=bool)
        if before < 1:
            first = uniform(PLACE)[stalled] < before
        if first.any():
            ttft[stalled[first]] += extra[first]
            stalled, extra = stalled[~first], extra[~first]
    if not latency.break_rate > 0:
        return stalled, extra, None
    ok = np.flatnonzero(drawn == OK)
    broke = ok[uniform(BREAK)[ok] < latency.break_rate]
    drawn[broke] = BROKEN
    broken_at = np.full(len(drawn), np.nan)
    broken_at[broke] = uniform(BREAK_AT)[broke]
    return stalled, extra, broken_at


def broken_services(
    ttft: np.ndarray,
    generation: np.ndarray,
    stalled: np.ndarray,
    extra: np.ndarray,
    onset: np.ndarray,
    drawn: np.ndarray,
    broken_at: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(the broken calls' rows, their service: first token, then the stream to its break, its
    mid-stream stall counted if its onset comes first), as `serve` times a broken call.
    `generation` is without the stall; call before it is turned into generation + stall."""
    broke = np.flatnonzero(drawn == BROKEN)
    stall = np.zeros(len(drawn))
    stall[stalled] = extra
    to_break = times_to_shares(broken_at[broke], generation[broke], stall[broke], onset[broke])
    return broke, ttft[broke] + to_break


def stream_cut(
    left: np.ndarray,
    ttft: np.ndarray,
    generation: np.ndarray,
    stall: np.ndarray,
    onset: np.ndarray,
    drawn: np.ndarray,
    broken_at: np.ndarray | None,
    first_token_after: float | None,
    idle_after: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """`event_serve._stream_cut` over arrays for calls granted a slot at their send (queued 0):
    (the seconds after the send at which each call is cut, if sooner than `left`; K_FIRST /
    K_IDLE where a stream cut set it, else 0). A stream cut that is set always comes before
    the call's end (its first token, or its stall's end, is later)."""
    label = np.zeros(len(left), dtype=np.int8)
    if first_token_after is not None:
        at = first_token_after - 0.0  # less the time queued: none
        hit = (ttft > at) & (at < left)
        left = np.where(hit, at, left)
        label[hit] = K_FIRST
    if idle_after is not None:
        answers = drawn == OK
        if broken_at is not None:
            answers |= (drawn == BROKEN) & (broken_at > onset)
        eligible = (stall > idle_after) & ~np.isnan(onset) & answers
        at = ttft + onset * generation + idle_after
        hit = eligible & (at < left)
        left = np.where(hit, at, left)
        label[hit] = K_IDLE
    return left, label


# ------------------------------------------------------------------- a broken stream's bill


def broken_tokens(output_tokens: np.ndarray | np.int64, broken_at: np.ndarray) -> np.ndarray:
    """The output tokens streamed before each break (`int(output_tokens * broken_at)`, as
    `event_serve._bill_broken`)."""
    return (output_tokens * broken_at).astype(np.int64)


def bill_broken(
    billing: str,
    broken_at: np.ndarray,
    broke: np.ndarray,
    output_tokens: int,
    out: dict[str, np.ndarray],
    input_cost: float,
    price_out: float,
) -> None:
    """`event_serve._bill_broken` on a chunk's broken calls (rows `broke`) in its columns
    `out`, as if each ran to its break (the cut and cancelled ones are settled afterwards):
    the tokens before the break streamed and, under `elapsed`, billed (`input_cost`: its
    input's dollars as billed)."""
    if not len(broke):
        return
    streamed = broken_tokens(np.int64(output_tokens), broken_at[broke])
    out["tokens_streamed"][broke] = streamed
    if billing == "elapsed":
        out["billed_output"][broke] = streamed
        out["cost"][broke] = input_cost + streamed * price_out


def broken_ran(
    billing: str,
    ran: np.ndarray,
    drawn: np.ndarray,
    broken_at: np.ndarray | None,
    input_tokens: np.ndarray | np.int64,
    output_tokens: np.ndarray | np.int64,
    billed: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(billed input, billed output, tokens streamed) with the calls that ran to their break
    (`ran` and broken) billed as `event_serve._bill_broken` bills them; the others as given
    (all of them when `broken_at` is None: no call breaks)."""
    if broken_at is None:
        return billed
    broke = ran & (drawn == BROKEN)
    billed_in, billed_out, streamed = billed
    if not broke.any():
        return billed
    at_break = broken_tokens(output_tokens, np.where(broke, broken_at, 0.0))
    streamed = np.where(broke, at_break, streamed)
    if billing == "none":
        return np.where(broke, 0, billed_in), np.where(broke, 0, billed_out), streamed
    billed_in = np.where(broke, input_tokens, billed_in)
    billed_out = np.where(broke, output_tokens if billing == "full" else at_break, billed_out)
    return billed_in, billed_out, streamed
