"""The simulated HTTP transport answers as the OpenAI and Anthropic APIs do: bodies with usage,
429s with Retry-After and the rate-limit headers, 4xx for what it cannot serve."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import numpy as np

from sim.harness.clock import run_simulated
from sim.harness.service import CURRENT_RUN, Service
from sim.harness.transport import SimulatedTransport, base_url
from sim.model.rows import Run
from sim.model.streams import CallDrawBank, Streams
from tests.helpers import build, plan_of

#: Two calls of 1,100 tokens against a 1,500 TPM quota: the second is refused.
LAW = {"ttft_s": {"dist": "constant", "value": 1.0},
       "tokens_per_s": {"dist": "constant", "value": 100.0}}  # fmt: skip
PROVIDERS = {"p1": {"tpm": 1500, "rpm": 100, "retry_after_ms": True, "serves": {"big": LAW}}}


def _exchange(
    api: str, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> list[httpx2.Response]:
    plan = plan_of(build(providers=PROVIDERS))
    streams = Streams(plan.seed, "main")
    service = Service(plan, CallDrawBank(streams.child("calls"), 1), streams)
    path = "/chat/completions" if api == "openai" else "/v1/messages"

    async def main() -> list[httpx2.Response]:
        CURRENT_RUN.set(Run(service.env, plan.workflow, 0, 0, plan.deadline_s))
        async with httpx2.AsyncClient(transport=SimulatedTransport(service)) as client:
            url = base_url("p1", api) + path
            return [await client.post(url, json=b, headers=headers or {}) for b in bodies]

    return run_simulated(service.env, main())


def test_an_openai_answer_then_a_429_with_its_headers() -> None:
    ok, limited = _exchange("openai", [{"model": "big", "messages": []}] * 2)
    body = ok.json()
    assert ok.status_code == 200
    assert body["object"] == "chat.completion"
    assert body["usage"] == {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert limited.status_code == 429
    assert limited.json()["error"]["type"] == "rate_limit_exceeded"
    wait = float(limited.headers["retry-after"])
    assert wait >= 1
    assert wait == int(wait)
    assert float(limited.headers["retry-after-ms"]) / 1000 <= wait
    assert limited.headers["x-ratelimit-limit-tokens"] == "1500"
    assert limited.headers["x-ratelimit-limit-requests"] == "100"


def test_an_anthropic_message_and_its_error_body() -> None:
    ok, limited = _exchange("anthropic", [{"model": "big", "max_tokens": 100, "messages": []}] * 2)
    assert ok.json()["type"] == "message"
    assert ok.json()["usage"] == {"input_tokens": 1000, "output_tokens": 100}
    assert limited.status_code == 429
    error = {"type": "rate_limit_error", "message": "rate limit reached (simulated)"}
    assert limited.json() == {"type": "error", "error": error}
    assert limited.headers["anthropic-ratelimit-tokens-limit"] == "1500"


def test_what_it_cannot_serve_is_a_4xx_naming_what_is() -> None:
    (unknown,) = _exchange("openai", [{"model": "nope", "messages": []}])
    assert unknown.status_code == 404
    assert "serves: big" in unknown.json()["error"]["message"]
    (bad_step,) = _exchange("openai", [{"model": "big"}], {"x-tailsim-step": "s9"})
    assert bad_step.status_code == 400
    assert "steps: s1" in json.dumps(bad_step.json())


def test_calls_keep_the_simulated_clock() -> None:
    """The first answer arrives at 2 s (1 s to first token, 100 tokens at 100/s)."""
    plan = plan_of(build(providers=PROVIDERS))
    streams = Streams(plan.seed, "main")
    service = Service(plan, CallDrawBank(streams.child("calls"), 1), streams)

    async def main() -> float:
        CURRENT_RUN.set(Run(service.env, plan.workflow, 0, 0, plan.deadline_s))
        async with httpx2.AsyncClient(transport=SimulatedTransport(service)) as client:
            await client.post(base_url("p1", "openai") + "/chat/completions", json={"model": "big"})
        return asyncio.get_running_loop().time()

    assert np.isclose(run_simulated(service.env, main()), 2.0)


def test_a_stream_is_server_sent_events_at_the_tokens_instants() -> None:
    """Headers at the first token (1 s), then pieces, the last at 2 s; `[DONE]` at the end."""
    plan = plan_of(build(providers=PROVIDERS))
    streams = Streams(plan.seed, "main")
    service = Service(plan, CallDrawBank(streams.child("calls"), 1), streams)

    async def main() -> list[tuple[float, str]]:
        loop = asyncio.get_running_loop()
        CURRENT_RUN.set(Run(service.env, plan.workflow, 0, 0, plan.deadline_s))
        got: list[tuple[float, str]] = []
        async with httpx2.AsyncClient(transport=SimulatedTransport(service)) as client:
            url = base_url("p1", "openai") + "/chat/completions"
            body = {"model": "big", "stream": True}
            async with client.stream("POST", url, json=body) as response:
                got.append((loop.time(), response.headers["content-type"]))
                async for line in response.aiter_lines():
                    if line:
                        got.append((loop.time(), line))
        return got

    got = run_simulated(service.env, main())
    assert got[0] == (1.0, "text/event-stream")
    chunks = [json.loads(line[6:]) for _, line in got[1:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert got[-1] == (2.0, "data: [DONE]")
    times = [t for t, _ in got[1:]]
    assert times == sorted(times)
    assert np.isclose(times[1], 1.0 + 1.0 / 8)  # the first of 8 pieces: an eighth of 1 s on
