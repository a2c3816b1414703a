"""A fake OpenAI-compatible chat server that behaves exactly as a tailsim provider: C slots with a
strictly FIFO queue, lognormal service, a token bucket answering 429 with whole-second
Retry-After, and one log line per HTTP request (arrival, slot, service, response, status).

With `"stream": true` in the request body the answer is streamed as Server-Sent Events
(`experiments.real_client.streaming`): the service time is the first-token time, then the
output at `--tokens-per-s`, with stalls placed before the first chunk or mid-stream and
mid-stream breaks (`--stall-*`, `--mid-stream-error-rate`).

Loopback only, one process; each deployment (`--deployments N`) is its own port with its own
slots, quota and log tag. Run `python -m experiments.real_client.server --help`. Times in the log
are `time.monotonic()` seconds, which on Linux is one clock for every process on the machine, so
the driver's log lines up with it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from aiohttp import web

from experiments.real_client.streaming import StreamLaw, stream_answer
from experiments.real_client.streaming import forced as forced_plan
from sim.model.latency import lognormal_params


class FifoSlots:
    """`capacity` slots handed out strictly in arrival order (a freed slot goes to the oldest
    waiter, never to a newcomer); a waiter cancelled while queued leaves the queue."""

    def __init__(self, capacity: int) -> None:
        self.free = capacity
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> None:
        """Take a slot, queueing behind every earlier caller."""
        if self.free > 0 and not self.waiters:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as we were cancelled: pass it on
            else:
                self.waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Give the slot to the oldest live waiter, else back to the pool."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class TokenBucket:
    """A bucket of `tpm` tokens refilling at tpm/60 per second (tailsim's `window: bucket`):
    full at start (`start: full`), or with `empty` empty at the first request (`start: steady`)."""

    def __init__(self, tpm: float | None, empty: bool = False) -> None:
        self.tpm = tpm
        self.level = 0.0 if empty else tpm or 0.0
        self.stamp: float | None = None if empty else time.monotonic()

    def take(self, tokens: int) -> float:
        """Charge `tokens` and return 0, or return the exact wait (s) until they would fit."""
        if self.tpm is None:
            return 0.0
        now = time.monotonic()
        if self.stamp is None:
            self.stamp = now  # an empty bucket starts its clock at the first request
        rate = self.tpm / 60.0
        self.level = min(self.tpm, self.level + (now - self.stamp) * rate)
        self.stamp = now
        if tokens <= self.level:
            self.level -= tokens
            return 0.0
        return (tokens - self.level) / rate


@dataclass
class Deployment:
    """One fake provider: its slots, quota, service-time law and log."""

    name: str
    slots: FifoSlots
    bucket: TokenBucket
    mu: float
    sigma: float
    rng: np.random.Generator
    log: TextIO
    stream: StreamLaw = field(default_factory=StreamLaw)
    stream_rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def write(self, row: dict[str, Any]) -> None:
        self.log.write(json.dumps(row) + "\n")


def _prompt_tokens(body: dict[str, Any]) -> int:
    """Whitespace-separated words of every message's content: the driver sends one word per
    input token, so the count is exact without a tokenizer."""
    total = 0
    for message in body.get("messages", []):
        content = message.get("content", "")
        if isinstance(content, str):
            total += len(content.split())
    return max(total, 1)


def _completion(body: dict[str, Any], prompt: int, completion: int) -> dict[str, Any]:
    """The body an OpenAI chat completion has (the fields the SDKs parse)."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok " * completion, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "system_fingerprint": "fake",
    }


async def _send(
    request: web.Request, status: int, payload: dict, headers: dict, row: dict[str, Any]
) -> web.StreamResponse:
    """Write a JSON response to the end, noting in `row` its status and when it was sent."""
    response = web.json_response(payload, status=status, headers=headers)
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionResetError:  # the client left (its deadline) as we answered: logged 499
        return response
    row["status"], row["sent"] = status, time.monotonic()
    return response


def handler(dep: Deployment):
    """The POST /v1/chat/completions handler of one deployment."""

    async def chat(request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-warmup"):  # the driver's warm-up: no quota, no slot, no log
            body = await request.json()
            return web.json_response(_completion(body, _prompt_tokens(body), 1))
        arrival = time.monotonic()
        row: dict[str, Any] = {
            "deployment": dep.name,
            "call_id": request.headers.get("x-call-id", ""),
            "retry": int(request.headers.get("x-stainless-retry-count", "0") or 0),
            "arrival": arrival,
            "slot": None,
            "start": None,
            "end": None,
            "sent": None,
            "status": 499,
            "tokens": 0,
        }
        held = False
        try:
            body = await request.json()
            prompt = _prompt_tokens(body)
            completion = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            row["tokens"] = prompt + completion
            wait = dep.bucket.take(prompt + completion)
            if wait > 0:
                retry_after = max(1, math.ceil(wait))
                row["retry_after"] = retry_after
                error = {"message": "Rate limit reached", "type": "tokens", "code": "rate_limit"}
                headers = {"Retry-After": str(retry_after)}
                return await _send(request, 429, {"error": error}, headers, row)
            await dep.slots.acquire()
            held = True
            row["slot"] = time.monotonic()
            forced = body.get("fake_service_s")
            service = (
                float(forced)
                if forced is not None
                else float(np.exp(dep.mu + dep.sigma * dep.rng.standard_normal()))
            )
            row["service"] = service
            row["start"] = time.monotonic()
            if body.get("stream"):
                plan = forced_plan(body, dep.stream.draw(dep.stream_rng, completion))
                row.update(stream=True, stall_s=plan["stall_s"], before=plan["before"])
                try:
                    return await stream_answer(
                        request, body, dep.stream, plan, service, completion, row
                    )
                except ConnectionResetError:  # the client left mid-stream: logged 499
                    return web.Response(status=499)
                finally:
                    row["end"] = row["sent"] = time.monotonic()
            await asyncio.sleep(service)
            row["end"] = time.monotonic()
            dep.slots.release()
            held = False
            return await _send(request, 200, _completion(body, prompt, completion), {}, row)
        finally:
            if held:
                dep.slots.release()  # cancelled (client gone) while holding the slot
            if row["status"] == 499:
                row["sent"] = time.monotonic()
            dep.write(row)

    return chat


def stream_law(args: argparse.Namespace) -> StreamLaw:
    """The streamed answers' law from the command line (`--stall-where`: mid_stream,
    before_first_token or the share S of stalls before the first token)."""
    where = {"mid_stream": 0.0, "before_first_token": 1.0}.get(args.stall_where)
    share = float(args.stall_where) if where is None else where
    return StreamLaw(
        args.tokens_per_s,
        args.chunk_tokens,
        args.stall_p,
        args.stall_median_s,
        args.stall_p99_s,
        share,
        args.mid_stream_error_rate,
    )


def _per_deployment(text: str | None, n: int) -> list[float | None]:
    """`--tpm` as one value per deployment (one value is shared by all)."""
    if text is None:
        return [None] * n
    values = [float(v) for v in str(text).split(",")]
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise SystemExit(f"--tpm: give 1 or {n} values, got {len(values)}")
    return values


async def serve(args: argparse.Namespace) -> None:
    """Start every deployment on a free loopback port, print the ports as one JSON line on
    stdout, and serve until SIGTERM/SIGINT."""
    with Path(args.log).open("w", buffering=1) as log:
        await _serve(args, log)


async def start(args: argparse.Namespace, log: TextIO) -> tuple[list[web.AppRunner], dict]:
    """Start every deployment on a free loopback port (in the running event loop); returns the
    runners (to `cleanup()`) and {deployment: port}."""
    mu, sigma = lognormal_params(args.median_s, args.p99_s)
    tpms = _per_deployment(args.tpm, args.deployments)
    runners, ports = [], {}
    for k in range(args.deployments):
        name = f"d{k}"
        dep = Deployment(
            name,
            FifoSlots(args.slots),
            TokenBucket(tpms[k], empty=args.start == "steady"),
            mu,
            sigma,
            np.random.default_rng([args.seed, k]),
            log,
            stream_law(args),
            np.random.default_rng([args.seed, k, 1]),  # the streams' own draws
        )
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler(dep))
        app.router.add_post("/chat/completions", handler(dep))
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports[name] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
    return runners, ports


async def _serve(args: argparse.Namespace, log: TextIO) -> None:
    runners, ports = await start(args, log)
    print(json.dumps({"ports": ports}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for runner in runners:
        await runner.cleanup()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (every behaviour parameter of the fake provider)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=12, help="calls served at once (FIFO queue)")
    ap.add_argument("--median-s", type=float, default=0.25, help="service time median, s")
    ap.add_argument("--p99-s", type=float, default=1.5, help="service time p99, s")
    ap.add_argument(
        "--tpm", default=None, help="tokens per minute (none: no 429s); a,b,...: per deployment"
    )
    ap.add_argument(
        "--start", choices=["full", "steady"], default="full", help="bucket full or empty at start"
    )
    ap.add_argument("--deployments", type=int, default=1, help="independent copies, one port each")
    ap.add_argument("--seed", type=int, default=0, help="seed of the service-time draws")
    ap.add_argument("--log", required=True, help="JSONL file: one line per HTTP request")
    st = ap.add_argument_group("streamed answers (requests with stream: true)")
    st.add_argument("--tokens-per-s", type=float, default=200.0, help="output speed")
    st.add_argument("--chunk-tokens", type=int, default=5, help="tokens per SSE chunk")
    st.add_argument("--stall-p", type=float, default=0.0, help="probability of a stall")
    st.add_argument("--stall-median-s", type=float, default=5.0, help="stall median, s")
    st.add_argument("--stall-p99-s", type=float, default=20.0, help="stall p99, s")
    st.add_argument(
        "--stall-where",
        default="mid_stream",
        help="mid_stream, before_first_token, or S: the share before the first token",
    )
    st.add_argument(
        "--mid-stream-error-rate", type=float, default=0.0, help="answers broken mid-stream"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point."""
    asyncio.run(serve(parse(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
