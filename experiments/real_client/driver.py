"""The real client: Poisson arrivals of a sequential multi-step workflow under a deadline, each
step one chat completion through the official `openai` SDK (AsyncOpenAI, default settings,
`max_retries=2`) or through a LiteLLM Router, against the fake server.

Every request is logged (arrival, end, outcome) and every client call (start, end, outcome),
on `time.monotonic()`, the server log's clock. The deadline is `asyncio.wait_for`: at the
deadline the call in flight is cancelled, its connection closed, and the server frees its slot.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Call = Callable[[str, int], Awaitable[Any]]


@dataclass(frozen=True)
class Workload:
    """What the driver sends: rate, count, steps per request, deadline, tokens per call."""

    rate_per_s: float
    requests: int
    steps: int = 3
    deadline_s: float = 2.5
    input_tokens: int = 200
    max_tokens: int = 50
    seed: int = 1

    def offsets(self) -> np.ndarray:
        """Nominal Poisson arrival offsets, s (the real ones are logged as they happen)."""
        rng = np.random.default_rng([self.seed, 1001])
        return np.cumsum(rng.exponential(1.0 / self.rate_per_s, size=self.requests))

    def messages(self) -> list[dict[str, str]]:
        """One user message of exactly `input_tokens` words (the server counts words)."""
        return [{"role": "user", "content": " ".join(["w"] * self.input_tokens)}]


def classify(error: BaseException) -> str:
    """A client-side outcome name for an exception from either SDK."""
    name = type(error).__name__
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if "RateLimit" in name:
        return "rate_limited"
    if "Timeout" in name:
        return "timeout"
    if "Connection" in name:
        return "connection"
    return "error"


async def drive(
    work: Workload, call: Call, warmup: Callable[[], Awaitable[Any]] | None = None
) -> tuple[list[dict], list[dict]]:
    """Send the workload through `call(call_id, step)` and return (requests, calls) log rows.
    `warmup` runs first, before the clock starts (imports, connection set-up)."""
    if warmup is not None:
        await warmup()
    requests: list[dict] = []
    calls: list[dict] = []

    async def step(req: int, k: int) -> None:
        call_id = f"{req}-{k}"
        row = {"request": req, "step": k, "call_id": call_id, "start": time.monotonic()}
        try:
            await call(call_id, k)
            row["outcome"] = "ok"
        except BaseException as error:
            row["outcome"] = classify(error)
            raise
        finally:
            row["end"] = time.monotonic()
            calls.append(row)

    async def workflow(req: int) -> None:
        for k in range(work.steps):
            await step(req, k)

    async def one(req: int) -> None:
        arrival = time.monotonic()
        row = {"request": req, "arrival": arrival}
        try:
            await asyncio.wait_for(workflow(req), work.deadline_s)
            row["outcome"] = "ok"
        except TimeoutError:
            row["outcome"] = "deadline"
        except Exception as error:
            row["outcome"] = classify(error)
        row["end"] = time.monotonic()
        requests.append(row)

    tasks = []
    start = time.monotonic()
    for req, offset in enumerate(work.offsets()):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req)))
    await asyncio.gather(*tasks)
    return requests, calls


async def run_openai(work: Workload, base_url: str) -> tuple[list[dict], list[dict]]:
    """The workload through `openai.AsyncOpenAI(max_retries=2)`, every other setting default."""
    import openai  # noqa: PLC0415 (optional extra)

    client = openai.AsyncOpenAI(base_url=base_url, api_key="fake", max_retries=2)
    messages = work.messages()

    async def call(call_id: str, _step: int) -> Any:
        return await client.chat.completions.create(
            model="fake",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=work.max_tokens,
            extra_headers={"x-call-id": call_id},
        )

    async def warmup() -> None:
        await client.chat.completions.create(
            model="fake", messages=messages, max_tokens=1, extra_headers={"x-warmup": "1"}
        )  # type: ignore[arg-type]

    try:
        return await drive(work, call, warmup)
    finally:
        await client.close()


async def run_openai_stream(
    work: Workload, base_url: str, read_timeout_s: float, stream_retries: int = 1
) -> tuple[list[dict], list[dict]]:
    """The workload through `openai.AsyncOpenAI(max_retries=2, timeout=read_timeout_s)` with
    `stream=True`, each answer read to its end. The SDK retries what fails before the
    response headers (a read timeout waiting for them, as a stall before the first chunk
    makes here); a read timeout or an `error` event after them is raised while iterating and
    not retried by the SDK (docs/fidelity.md, "Streaming", cites where). The driver retries a
    failed call itself up to `stream_retries` times (tailsim's `wait` with `retries`), as a
    client that restarts a broken stream does."""
    import openai  # noqa: PLC0415 (optional extra)

    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="fake", max_retries=2, timeout=read_timeout_s
    )
    messages = work.messages()

    async def call(call_id: str, _step: int) -> Any:
        for attempt in range(stream_retries + 1):
            chunks = 0
            try:
                stream = await client.chat.completions.create(
                    model="fake",
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=work.max_tokens,
                    stream=True,
                    extra_headers={"x-call-id": call_id, "x-stream-attempt": str(attempt)},
                )
                async for _ in stream:
                    chunks += 1
                return chunks
            except openai.APIError:  # APITimeoutError and APIConnectionError are APIErrors
                if attempt == stream_retries:
                    raise
        return None

    async def warmup() -> None:
        await client.chat.completions.create(
            model="fake", messages=messages, max_tokens=1, extra_headers={"x-warmup": "1"}
        )  # type: ignore[arg-type]

    try:
        return await drive(work, call, warmup)
    finally:
        await client.close()


def litellm_router(config: dict[str, Any]) -> Any:
    """A `litellm.Router` built from a proxy-style config (`model_list`, `router_settings`)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
    import litellm  # noqa: PLC0415 (optional extra)

    litellm.telemetry = False
    return litellm.Router(model_list=config["model_list"], **config.get("router_settings", {}))


async def run_litellm(
    work: Workload, config: dict[str, Any], model: str
) -> tuple[list[dict], list[dict]]:
    """The workload through a LiteLLM Router built from `config`, asking for group `model`
    (every group is warmed up first)."""
    router = litellm_router(config)
    groups = sorted({m["model_name"] for m in config["model_list"]})
    messages = work.messages()

    async def call(call_id: str, _step: int) -> Any:
        return await router.acompletion(
            model=model,
            messages=messages,
            max_tokens=work.max_tokens,
            extra_headers={"x-call-id": call_id},
        )

    async def warmup() -> None:
        for group in groups:
            await router.acompletion(
                model=group, messages=messages, max_tokens=1, extra_headers={"x-warmup": "1"}
            )

    return await drive(work, call, warmup)
