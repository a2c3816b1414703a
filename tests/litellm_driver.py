"""Drive litellm's own Router for tests/policy/test_router.py, in a process of its own.

Reads `{"mode": "mocked" | "served", "groups": {deployment: group}, "jobs": [...]}` as JSON
on stdin and prints one JSON list: per job, (sleeps asked for, deployments called, the
deployment that answered or null). `asyncio.sleep` is recorded, not slept, and `random.random`
returns 0.5 (the jitter's draw), so nothing here depends on wall time. "mocked": deployments
fail by `mock_response` (no Retry-After header), one request per job. "served": deployments
are local HTTP servers (aiohttp, 127.0.0.1, port 0) answering per plan (a 429 carries
`Retry-After: 2`), two requests per job one after the other. "streamed": the same servers
stream the answer (SSE): a first chunk, then `break` sends an error event (a stream broken
mid-answer) and `ok` the rest; one streamed request per job, read to its end.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

import litellm
from aiohttp import web
from litellm.integrations.custom_logger import CustomLogger

MOCKS = {"500": "litellm.InternalServerError", "429": "litellm.RateLimitError", None: "hi"}
ANSWER = {
    "id": "x", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}  # fmt: skip
SLEEPS: list[float] = []
CALLED: list[str] = []
_REAL_SLEEP = asyncio.sleep


async def _sleep(seconds: float, *args: Any, **kwargs: Any) -> None:
    if seconds > 0:
        SLEEPS.append(float(seconds))
    await _REAL_SLEEP(0)


class _Calls(CustomLogger):  # type: ignore[misc]
    def log_pre_api_call(self, model: str, messages: Any, kwargs: Any) -> None:
        info = (kwargs.get("litellm_params") or {}).get("model_info") or {}
        CALLED.append(str(info.get("id") or model))


async def _ask(router: Any, group: str) -> str | None:
    messages = [{"role": "user", "content": "hi"}]
    asyncio.sleep = _sleep  # type: ignore[assignment]
    try:
        response = await router.acompletion(model=group, messages=messages)
    except Exception:  # the Router gave up
        return None
    finally:
        asyncio.sleep = _REAL_SLEEP  # type: ignore[assignment]
    return str(response._hidden_params.get("model_id"))


async def mocked(script: dict[str, str | None], groups: dict[str, str], keys: dict) -> list:
    model_list = [
        {"model_name": groups[name], "model_info": {"id": name},
         "litellm_params": {"model": f"openai/{name}", "mock_response": MOCKS[kind]}}
        for name, kind in script.items()
    ]  # fmt: skip
    router = litellm.Router(model_list=model_list, **keys)
    answered = await _ask(router, "big")
    return [list(SLEEPS), list(CALLED), answered]


async def served(plan: dict[str, list[str]], groups: dict[str, str], keys: dict) -> list:
    count: dict[str, int] = {}
    runners, model_list, names = [], [], {}

    async def handler(request: web.Request) -> web.Response:
        name = request.app["name"]
        i = count.get(name, 0)
        count[name] = i + 1
        outcome = plan[name][min(i, len(plan[name]) - 1)]
        if outcome == "429":
            return web.json_response(
                {"error": {"message": "slow"}}, status=429, headers={"retry-after": "2"}
            )
        if outcome == "500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        return web.json_response(ANSWER)

    for name in plan:
        app = web.Application()
        app["name"] = name
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        base = f"http://127.0.0.1:{port}/v1"
        names[base] = name
        model_list.append({"model_name": groups[name], "model_info": {"id": name},
                           "litellm_params": {"model": "openai/m", "api_key": "x",
                                              "api_base": base}})  # fmt: skip
    router = litellm.Router(model_list=model_list, **keys)
    per_request, answers = [], []
    try:
        for _ in range(2):
            CALLED.clear()
            answers.append(await _ask(router, "big"))
            per_request.append(list(CALLED))
    finally:
        for runner in runners:
            await runner.cleanup()
    return [list(SLEEPS), per_request, answers]


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {"role": "assistant", "content": text} if text else {}
    data = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(data)}\n\n".encode()


async def streamed(plan: dict[str, str], groups: dict[str, str], keys: dict) -> list:
    runners, model_list = [], []

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk("Hello "))
        if plan[request.app["name"]] == "break":
            await response.write(b'data: {"error": {"message": "overloaded", "code": 500}}\n\n')
        else:
            await response.write(_chunk("world", "stop") + b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    for name in plan:
        app = web.Application()
        app["name"] = name
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        # a continuation goes only to deployments that take an assistant prefill
        info = {"id": name, "supports_assistant_prefill": True}
        base = f"http://127.0.0.1:{port}/v1"
        model_list.append({"model_name": groups[name], "model_info": info,
                           "litellm_params": {"model": "openai/m", "api_key": "x",
                                              "api_base": base}})  # fmt: skip
    router = litellm.Router(model_list=model_list, **keys)
    messages = [{"role": "user", "content": "hi"}]
    text, answered = "", True
    asyncio.sleep = _sleep  # type: ignore[assignment]
    try:
        response = await router.acompletion(model="big", messages=messages, stream=True)
        async for part in response:
            text += part.choices[0].delta.content or ""
    except Exception:  # the stream's error reached the caller
        answered = False
    finally:
        asyncio.sleep = _REAL_SLEEP  # type: ignore[assignment]
        await _REAL_SLEEP(0.2)  # let the failure callbacks finish
        for runner in runners:
            await runner.cleanup()
    return [list(SLEEPS), list(CALLED), answered and text == "Hello world"]


def main() -> None:
    request = json.loads(sys.stdin.read())
    random.random = lambda: 0.5  # type: ignore[assignment]
    litellm.callbacks = [_Calls()]
    drive = {"mocked": mocked, "served": served, "streamed": streamed}[request["mode"]]
    results = []
    for case, keys in request["jobs"]:
        SLEEPS.clear()
        CALLED.clear()
        results.append(asyncio.run(drive(case, request["groups"], keys)))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
