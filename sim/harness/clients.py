"""What the user's handler is given: its request, and clients pointed at the simulated providers.

`Request` carries a request's id, arrival and absolute deadline in loop time. `Clients` makes
the real SDKs' clients on the simulated transport, one per provider and settings, kept for the
whole drive as a service keeps its clients: `openai(provider, **kwargs)` an `openai.AsyncOpenAI`,
`anthropic(provider, **kwargs)` an `anthropic.AsyncAnthropic`, and `litellm_router(model_list,
**settings)` a `litellm.Router` whose deployments reach the providers through
`litellm.aclient_session` (LiteLLM's own hook for the HTTP client its OpenAI calls use).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

import httpx2

from sim.harness.service import Service
from sim.harness.transport import SimulatedTransport, base_url

#: The API key every simulated client sends (the providers do not check it).
API_KEY = "tailsim"


@dataclass(frozen=True, slots=True)
class Request:
    """One send of one customer request, as the handler sees it (times in loop seconds)."""

    id: int
    resend: int
    arrival_s: float
    deadline_s: float

    def time_left(self) -> float:
        """Seconds until this request's deadline, now (negative once it has passed)."""
        return self.deadline_s - asyncio.get_running_loop().time()


class Clients:
    """Ready clients of the real SDKs, each pointed at one simulated provider."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.transport = SimulatedTransport(service)
        self._made: dict[tuple[str, str, str], Any] = {}

    @property
    def providers(self) -> list[str]:
        """The scenario's providers, by name (the host each client is pointed at)."""
        return list(self.service.providers)

    def model(self, provider: str) -> str:
        """The model to send to `provider`: the first it serves in the scenario."""
        return next(iter(self._provider(provider).serving))

    def http_client(self) -> httpx2.AsyncClient:
        """An HTTP client over the simulated transport (the SDKs' `http_client=`)."""
        return httpx2.AsyncClient(transport=self.transport)

    def openai(self, provider: str, **kwargs: Any) -> Any:
        """An `openai.AsyncOpenAI` on `provider`; `kwargs` go to it (max_retries, timeout)."""
        return self._client("openai", provider, kwargs)

    def anthropic(self, provider: str, **kwargs: Any) -> Any:
        """An `anthropic.AsyncAnthropic` on `provider`; `kwargs` go to it."""
        return self._client("anthropic", provider, kwargs)

    def deployment(self, provider: str, model: str | None = None) -> dict[str, Any]:
        """A LiteLLM deployment's `litellm_params` for `provider` (an OpenAI-compatible one)."""
        model = model or self.model(provider)
        return {"model": f"openai/{model}", "api_base": base_url(provider, "openai"),
                "api_key": API_KEY}  # fmt: skip

    def litellm_router(self, model_list: list[dict[str, Any]], **settings: Any) -> Any:
        """A `litellm.Router` over `model_list` (use `deployment` for each entry's
        `litellm_params`), made once per drive and settings (its cooldowns and usage live in
        it); its OpenAI calls go through the simulated transport."""
        key = ("litellm", "", repr((model_list, sorted(settings.items()))))
        made = self._made.get(key)
        if made is None:
            # its price map from the package, not fetched from GitHub at import
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm  # noqa: PLC0415 - only when a handler asks for it

            litellm.aclient_session = self.http_client()
            made = self._made[key] = litellm.Router(model_list=model_list, **settings)
        return made

    def _client(self, api: str, provider: str, kwargs: dict[str, Any]) -> Any:
        self._provider(provider)
        key = (api, provider, repr(sorted(kwargs.items())))
        made = self._made.get(key)
        if made is None:
            if api == "openai":
                import openai  # noqa: PLC0415 - the SDK the handler uses, on demand

                made = openai.AsyncOpenAI(base_url=base_url(provider, api), api_key=API_KEY,
                                          http_client=self.http_client(), **kwargs)  # fmt: skip
            else:
                import anthropic  # noqa: PLC0415 - the SDK the handler uses, on demand

                made = anthropic.AsyncAnthropic(
                    base_url=base_url(provider, api), api_key=API_KEY,
                    http_client=self.http_client(), **kwargs,
                )  # fmt: skip
            self._made[key] = made
        return made

    def _provider(self, name: str) -> Any:
        found = self.service.providers.get(name)
        if found is None:
            raise KeyError(f"no provider {name!r}; the scenario's: {', '.join(self.providers)}")
        return found
