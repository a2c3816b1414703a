"""The fake server's streaming answer: Server-Sent Events in the OpenAI chat.completions stream
format (`chat.completion.chunk` objects, then `data: [DONE]`), with tailsim's stream law.

The first chunk leaves after the first-token time (the deployment's lognormal service time),
plus the stall where it sits before the first token; the status line and headers go out with
the first chunk (so a stall before it is a wait for the response headers, as behind a proxy that
answers at the first byte). Then the output at `tokens_per_s`, `chunk_tokens` tokens a chunk; a
mid-stream stall pauses it at a uniform onset over the output tokens; a broken answer sends an
SSE `error` event after a uniform share of its tokens and ends without `[DONE]` (the openai SDK
raises `APIError` on it: `openai/_streaming.py`, `AsyncStream.__stream__`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from sim.model.latency import lognormal_params


@dataclass(frozen=True)
class StreamLaw:
    """How a streamed answer unfolds (the streams schema's keys, as the server draws them)."""

    tokens_per_s: float = 200.0
    chunk_tokens: int = 5
    stall_probability: float = 0.0
    stall_median_s: float = 5.0
    stall_p99_s: float = 20.0
    before_first_token: float = 0.0  # stall.where: 0 mid_stream, 1 before_first_token, else S
    mid_stream_error_rate: float = 0.0

    def draw(self, rng: np.random.Generator, tokens: int) -> dict[str, Any]:
        """One answer's stall (s), its place, its onset (tokens) and its break (tokens, or
        None). Always six draws, so one answer's draws never shift the next one's."""
        u_stall, u_where, u_onset, u_break, u_at = rng.random(5).tolist()
        z = float(rng.standard_normal())
        mu, sigma = lognormal_params(self.stall_median_s, self.stall_p99_s)
        stall = float(np.exp(mu + sigma * z)) if u_stall < self.stall_probability else 0.0
        broken = u_break < self.mid_stream_error_rate
        return {
            "stall_s": stall,
            "before": u_where < self.before_first_token,
            "onset": min(tokens - 1, int(u_onset * tokens)),
            "break_at": min(tokens - 1, int(u_at * tokens)) if broken else None,
        }


def forced(body: dict[str, Any], drawn: dict[str, Any]) -> dict[str, Any]:
    """The draw with a test's overrides from the request body: `fake_stall_s`,
    `fake_stall_where` (`before_first_token` | `mid_stream`), `fake_break_after` (tokens)."""
    out = dict(drawn)
    if body.get("fake_stall_s") is not None:
        out["stall_s"] = float(body["fake_stall_s"])
        out["before"] = body.get("fake_stall_where", "mid_stream") == "before_first_token"
    if body.get("fake_break_after") is not None:
        out["break_at"] = int(body["fake_break_after"])
    return out


def chunk(cid: str, model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One `chat.completion.chunk` as an SSE `data:` event."""
    payload = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n".encode()


async def stream_answer(
    request: web.Request,
    body: dict[str, Any],
    law: StreamLaw,
    plan: dict[str, Any],
    first_token_s: float,
    completion: int,
    row: dict[str, Any],
) -> web.StreamResponse:
    """Send one streamed answer of `completion` tokens as `plan` (a `StreamLaw.draw`) places
    its stall and break, noting in `row` the first chunk's time, tokens sent and how it ended."""
    model = str(body.get("model", "fake"))
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    stall = plan["stall_s"]
    await asyncio.sleep(first_token_s + (stall if plan["before"] else 0.0))
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    row["first"] = time.monotonic()
    await response.write(chunk(cid, model, {"role": "assistant", "content": ""}))
    sent = 0
    step = max(1, law.chunk_tokens)
    while sent < completion:
        if stall and not plan["before"] and sent <= plan["onset"] < sent + step:
            await asyncio.sleep(stall)
        if plan["break_at"] is not None and sent <= plan["break_at"] < sent + step:
            error = {"message": "overloaded", "type": "server_error", "code": "overloaded"}
            await response.write(f"event: error\ndata: {json.dumps({'error': error})}\n\n".encode())
            row["status"], row["broken"], row["tokens_sent"] = 200, True, sent
            await response.write_eof()
            return response
        n = min(step, completion - sent)
        await asyncio.sleep(n / law.tokens_per_s)
        await response.write(chunk(cid, model, {"content": "ok " * n}))
        sent += n
    await response.write(chunk(cid, model, {}, "stop"))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    row["status"], row["tokens_sent"] = 200, sent
    return response
