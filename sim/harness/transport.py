"""An httpx transport that speaks the OpenAI chat-completions and Anthropic messages APIs.

The SDKs take it through their own `http_client=` (an `httpx2.AsyncClient(transport=...)`, the
HTTP client openai 3.x and anthropic 2.x are built on). The host names the provider
(`http://<provider>.tailsim/...`), the body's `model` its serving path, the `x-tailsim-step`
header the workflow step. Each request is one call on `sim.harness.service.Service`; the
answer is what the real APIs send: a completion or message with its usage; a 429 with
`retry-after`, `retry-after-ms` (where the provider sends it) and the `x-ratelimit-*` (OpenAI)
or `anthropic-ratelimit-*` headers; a 500 on an error; `httpx2.ReadTimeout` when the call
outlives the client's read timeout (a non-streamed answer's headers come after its last
token, so the read timeout bounds the whole call, as over a socket); a closed connection when
the answer breaks. A streamed request (`stream: true`) gets its tokens as server-sent events
in simulated time (`sim.harness.streaming`).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx2

from sim.harness.service import CURRENT_RUN, STEP_HEADER, Service, ServiceError
from sim.harness.streaming import Served, StreamedAnswer, streamed_response
from sim.model.rows import (
    OUTCOME_BROKEN,
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_INVALID,
    OUTCOME_OK,
    OUTCOME_RATE_LIMITED,
    OUTCOME_TIMEOUT,
    OUTCOME_TRUNCATED,
    Call,
)

#: What a junk answer says (an answer the step's validator would reject).
JUNK = "[tailsim: junk answer]"
HOST_SUFFIX = ".tailsim"


def base_url(provider: str, api: str) -> str:
    """The base URL a client of `api` ('openai' or 'anthropic') uses for `provider`."""
    return f"http://{provider}{HOST_SUFFIX}" + ("/v1" if api == "openai" else "")


def is_junk(text: str | None) -> bool:
    """Whether an answer's text is the simulated junk answer (what a validator would catch)."""
    return text is not None and text.startswith(JUNK)


class SimulatedTransport(httpx2.AsyncBaseTransport):
    """Every request a client sends, served as one call on the simulated providers."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Serve `request`: parse it, live its call in simulated time, answer as the API."""
        path = request.url.path
        api = "anthropic" if path.endswith("/messages") else "openai"
        if not (path.endswith("/chat/completions") or path.endswith("/messages")):
            return _error(request, api, 404, "not_found_error", f"no such endpoint {path}")
        body = json.loads(await request.aread() or b"{}")
        host = request.url.host
        provider = host[: -len(HOST_SUFFIX)] if host.endswith(HOST_SUFFIX) else host
        run = CURRENT_RUN.get(None)
        if run is None:
            return _error(request, api, 400, "invalid_request_error",
                          "a call outside a request: make calls inside the handler")  # fmt: skip
        service = self.service
        timeout = request.extensions.get("timeout", {}).get("read")
        streamed = bool(body.get("stream"))
        served = Served() if streamed else None
        try:
            step = service.step_for(run, request.headers.get(STEP_HEADER))
            model = str(body.get("model", ""))
            cut = None if streamed else timeout  # a stream's read timeout holds between bytes
            call, done, process = service.start(run, provider, model, step, cut, served)
        except ServiceError as error:
            return _error(request, api, error.status, error.kind, str(error))
        try:
            if served is not None:
                answer = StreamedAnswer(service, request, api, run, (call, done, process),
                                        served, timeout)  # fmt: skip
                got = await streamed_response(answer)
                if isinstance(got, httpx2.Response):
                    return got
                call = got
            else:
                call = await asyncio.shield(done)
        except asyncio.CancelledError:
            service.cancel(process, run)
            raise
        return _answer(request, api, service, call)


def _answer(request: httpx2.Request, api: str, service: Service, call: Call) -> httpx2.Response:
    """The HTTP answer to an ended call, as the API would send it."""
    outcome = call.outcome
    if outcome == OUTCOME_RATE_LIMITED:
        return _rate_limited(request, api, service, call)
    if outcome == OUTCOME_TIMEOUT:
        raise httpx2.ReadTimeout("simulated read timeout", request=request)
    if outcome == OUTCOME_CANCELLED:  # its request ended while the call was in flight
        raise httpx2.RemoteProtocolError("the request ended: call cancelled", request=request)
    if outcome == OUTCOME_BROKEN:
        raise httpx2.RemoteProtocolError("peer closed connection mid-answer", request=request)
    if outcome == OUTCOME_ERROR or outcome not in (OUTCOME_OK, OUTCOME_INVALID, OUTCOME_TRUNCATED):
        return _error(request, api, 500, "api_error" if api == "anthropic" else "server_error",
                      "simulated provider error")  # fmt: skip
    text = JUNK if outcome == OUTCOME_INVALID else f"tailsim answer {call.step}"
    cut = outcome == OUTCOME_TRUNCATED
    ident = f"tailsim-{call.run.index}-{call.step}-{call.attempt}"
    if api == "anthropic":
        body: dict[str, Any] = {
            "id": f"msg_{ident}", "type": "message", "role": "assistant", "model": call.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "max_tokens" if cut else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": call.input_tokens, "output_tokens": call.output_tokens},
        }  # fmt: skip
    else:
        body = {
            "id": f"chatcmpl-{ident}", "object": "chat.completion", "created": 0,
            "model": call.model,
            "choices": [{"index": 0, "finish_reason": "length" if cut else "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": call.input_tokens,
                      "completion_tokens": call.output_tokens,
                      "total_tokens": call.input_tokens + call.output_tokens},
        }  # fmt: skip
    return httpx2.Response(200, json=body, request=request)


def _rate_limited(
    request: httpx2.Request, api: str, service: Service, call: Call
) -> httpx2.Response:
    """A 429 with the headers the real API sends: Retry-After (whole seconds, or as the
    scenario's `retry_after` says), retry-after-ms, and the rate-limit headers."""
    provider = service.providers[call.provider]
    headers: dict[str, str] = {}
    wait = call.retry_after
    if math.isfinite(wait):
        headers["retry-after"] = _number(wait)
        if provider.sends_retry_after_ms and math.isfinite(call.retry_after_ms):
            headers["retry-after-ms"] = _number(call.retry_after_ms * 1000)
    spec = service.plan.providers[call.provider].spec
    prefix = "anthropic-ratelimit-" if api == "anthropic" else "x-ratelimit-"
    if spec.tpm is not None:
        headers[prefix + ("tokens-limit" if api == "anthropic" else "limit-tokens")] = str(
            int(spec.tpm)
        )
    if spec.rpm is not None:
        headers[prefix + ("requests-limit" if api == "anthropic" else "limit-requests")] = str(
            int(spec.rpm)
        )
    if math.isfinite(wait) and api == "openai":
        headers["x-ratelimit-reset-tokens"] = f"{wait:g}s"
    kind = "rate_limit_error" if api == "anthropic" else "rate_limit_exceeded"
    return _error(request, api, 429, kind, "rate limit reached (simulated)", headers)


def _number(value: float) -> str:
    """A header number: an integer where it is one, else its shortest decimal."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _error(
    request: httpx2.Request,
    api: str,
    status: int,
    kind: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    """An error answer in the API's own error body."""
    if api == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "code": kind}}
    return httpx2.Response(status, json=body, headers=headers or {}, request=request)
