"""A streamed answer (`stream: true`) over the simulated transport: its tokens in simulated time.

The call is lived by the engine's `serve` as any other. As its service starts, `serve` says
its first-token time, generation time, stall and drawn outcome (`on_served`). The response's
headers come at the first token, and its body (server-sent events, as the OpenAI and Anthropic
APIs send them) in pieces at the instants those shares of the tokens have streamed
(`sim.model.stream.time_to_share`: none during a mid-stream stall). A break closes the
connection where it broke. The client's read timeout holds between bytes, as httpx holds it
over a socket: a first token or a next piece later than it cuts the call there (outcome
timeout, `ended_by` sdk), billed as a cut. A client that stops reading cancels the call.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from sim.harness.service import BY_READ_IDLE, BY_READ_TIMEOUT, Service
from sim.model.latency import BROKEN, OK
from sim.model.rows import Call, Run
from sim.model.stream import time_to_share

#: How many pieces an answer streams in (at most; one token each at least).
PIECES = 8
SSE = {"content-type": "text/event-stream"}


class Served:
    """What `serve` said as the call's service started (set once, at that instant)."""

    def __init__(self) -> None:
        self.future: asyncio.Future[tuple[float, float, float, float, int]] = (
            asyncio.get_running_loop().create_future()
        )

    def __call__(self, ttft: float, generation: float, stall: float, drawn: int) -> None:
        loop = self.future.get_loop()
        if not self.future.done():
            self.future.set_result((loop.time(), ttft, generation, stall, drawn))


async def _until(
    future: asyncio.Future[Any], at: float, request: httpx2.Request
) -> tuple[bool, Any]:
    """(True, result) if `future` is done by loop time `at`, else (False, None) at `at`."""
    wait = at - asyncio.get_running_loop().time()
    try:
        return True, await asyncio.wait_for(asyncio.shield(future), max(wait, 0.0))
    except TimeoutError:
        return False, None


class StreamedAnswer:
    """One streamed call: its headers at the first token, then its pieces."""

    def __init__(
        self,
        service: Service,
        request: httpx2.Request,
        api: str,
        run: Run,
        started: tuple[Call, asyncio.Future[Call], Any],
        served: Served,
        read_timeout: float | None,
    ) -> None:
        self.service, self.request, self.api, self.run = service, request, api, run
        self.call, self.done, self.process = started
        self.served, self.read_timeout = served, read_timeout
        self.finished = False

    def _timed_out(self, streaming: bool = False) -> httpx2.ReadTimeout:
        """Cut the call at the read timeout (billed as a cut) and say so as httpx does."""
        self.service.cancel(self.process, self.run, BY_READ_IDLE if streaming else BY_READ_TIMEOUT)
        self.finished = True
        return httpx2.ReadTimeout("simulated read timeout (stream)", request=self.request)

    def _limit(self, since: float) -> float:
        return math.inf if self.read_timeout is None else since + self.read_timeout

    async def headers(self) -> tuple[Call | None, float, float, float, float, int]:
        """Wait for the first token (or the call's end, for a 429 or an error): (the ended
        call or None, first-token time, generation, stall, onset, drawn)."""
        loop = asyncio.get_running_loop()
        limit = self._limit(loop.time())
        waiting = {asyncio.ensure_future(asyncio.shield(self.served.future)),
                   asyncio.ensure_future(asyncio.shield(self.done))}  # fmt: skip
        try:
            wait = None if math.isinf(limit) else max(limit - loop.time(), 0.0)
            finished, _ = await asyncio.wait(waiting, timeout=wait,
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            for task in waiting:
                task.cancel()
        if not finished:
            raise self._timed_out()
        if not self.served.future.done():  # ended unserved: a 429, a queue cut
            return self.done.result(), 0.0, 0.0, 0.0, math.nan, OK
        served_at, ttft, generation, stall, drawn = self.served.future.result()
        if drawn not in (OK, BROKEN):  # an error or junk: answered whole at its first token
            ok, call = await _until(self.done, limit, self.request)
            if not ok:
                raise self._timed_out()
            return call, 0.0, 0.0, 0.0, math.nan, drawn
        first = served_at + ttft
        if first > limit:
            await asyncio.sleep(max(limit - loop.time(), 0.0))
            raise self._timed_out()
        await asyncio.sleep(max(first - loop.time(), 0.0))
        return None, first, generation, stall, self.call.onset, drawn

    async def body(
        self, first: float, generation: float, stall: float, onset: float, drawn: int
    ) -> AsyncIterator[bytes]:
        """The answer's events, each at its instant; the read timeout holds between them."""
        loop = asyncio.get_running_loop()
        call = self.call
        pieces = max(1, min(PIECES, call.output_tokens))
        end = call.broken_at if drawn == BROKEN else 1.0
        marks = {k / pieces for k in range(1, pieces + 1) if k / pieces < end} | {end}
        if stall > 0 and 0 < onset < end:  # a piece just as the stall begins: the last byte
            marks.add(onset)  # before the silence, so the read timeout runs from its onset
        shares = sorted(marks)
        try:
            yield self._start()
            sent = 0
            for share in shares:
                at = first + time_to_share(share, generation, stall, onset)
                if at > self._limit(loop.time()):
                    await asyncio.sleep(max(self._limit(loop.time()) - loop.time(), 0.0))
                    raise self._timed_out(streaming=True)
                await asyncio.sleep(max(at - loop.time(), 0.0))
                tokens = int(call.output_tokens * share) - sent
                sent += tokens
                if share < 1.0 or drawn != BROKEN:
                    yield self._delta(" tok" * max(tokens, 0))
            if drawn == BROKEN:
                await asyncio.shield(self.done)
                self.finished = True
                raise httpx2.RemoteProtocolError("peer closed connection mid-stream",
                                                 request=self.request)  # fmt: skip
            ended = await asyncio.shield(self.done)
            self.finished = True
            yield self._end(ended)
        finally:
            if not self.finished:  # the client stopped reading: the call is cancelled
                self.service.cancel(self.process, self.run)

    def _event(self, name: str, data: dict[str, Any]) -> bytes:
        head = f"event: {name}\n" if self.api == "anthropic" else ""
        return f"{head}data: {json.dumps(data)}\n\n".encode()

    def _start(self) -> bytes:
        call = self.call
        if self.api == "anthropic":
            usage = {"input_tokens": call.input_tokens, "output_tokens": 1}
            message = {"id": f"msg_{call.run.index}", "type": "message", "role": "assistant",
                       "model": call.model, "content": [], "stop_reason": None,
                       "stop_sequence": None, "usage": usage}  # fmt: skip
            return self._event("message_start", {"type": "message_start", "message": message}) + (
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
        return self._chunk({"role": "assistant", "content": f"tailsim answer {call.step}"}, None)

    def _delta(self, text: str) -> bytes:
        if self.api == "anthropic":
            return self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": text}})  # fmt: skip
        return self._chunk({"content": text}, None)

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> bytes:
        call = self.call
        data = {"id": f"chatcmpl-{call.run.index}", "object": "chat.completion.chunk",
                "created": 0, "model": call.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return self._event("chunk", data)

    def _end(self, call: Call) -> bytes:
        cut = call.outcome == "truncated"
        if self.api == "anthropic":
            stop = "max_tokens" if cut else "end_turn"
            return (
                self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
                + self._event(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": call.output_tokens},
                    },
                )
                + self._event("message_stop", {"type": "message_stop"})
            )
        return self._chunk({}, "length" if cut else "stop") + b"data: [DONE]\n\n"


class _Body(httpx2.AsyncByteStream):
    def __init__(self, pieces: AsyncIterator[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        await self.pieces.aclose()  # type: ignore[attr-defined]


async def streamed_response(answer: StreamedAnswer) -> httpx2.Response | Call:
    """The response to a streamed request: headers at the first token and the body after; or
    the ended call (a 429, an error, junk) for the caller to answer whole."""
    ended, first, generation, stall, onset, drawn = await answer.headers()
    if ended is not None:
        return ended
    body = answer.body(first, generation, stall, onset, drawn)
    return httpx2.Response(200, headers=SSE, stream=_Body(body), request=answer.request)
