"""List prices for `tailsim import litellm`: LiteLLM's own price map, the part a chat call needs.

`litellm_prices.json` beside this module is a copy of two fields (`input_cost_per_token`,
`output_cost_per_token`, USD per token) of the chat models of a few providers in the price map
LiteLLM 1.110.2 ships (`litellm/model_prices_and_context_window_backup.json`, MIT licence,
Copyright (c) 2023 Berri AI: `LICENSE-litellm.txt` beside it). A deployment's price is looked
up the way LiteLLM's cost tracking finds it: custom pricing on the deployment first, then its
`base_model`, then its model string with and without the provider prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

#: Where the bundled prices come from (said in the imported file's header).
PRICE_SOURCE = "LiteLLM 1.110.2's price map"
#: Custom-pricing keys a deployment may carry (litellm_params or model_info), USD per token.
COST_KEYS = ("input_cost_per_token", "output_cost_per_token")


@dataclass(frozen=True)
class Price:
    """USD per million tokens, and where the figure came from."""

    input: float
    output: float
    source: str  # e.g. "LiteLLM 1.110.2's price map, 'gpt-4o'" or "custom pricing"

    def as_spec(self) -> dict[str, float]:
        return {"input": self.input, "output": self.output}


@cache
def price_map() -> dict[str, tuple[float, float]]:
    """The bundled map: model name -> (USD per input token, USD per output token)."""
    text = resources.files("sim.adapters").joinpath("litellm_prices.json").read_text("utf-8")
    return {name: (float(a), float(b)) for name, (a, b) in json.loads(text)["models"].items()}


def per_million(per_token: float) -> float:
    """USD per token as USD per million tokens, in exact decimals (5e-07 -> 0.5, not 0.49999)."""
    return float(Decimal(repr(float(per_token))) * 1_000_000)


def candidates(model: str, base_model: str | None) -> list[str]:
    """Names to look a deployment up by, in LiteLLM's order: its base_model, the model string,
    and each without its provider prefix ('azure/gpt-4o' -> 'gpt-4o')."""
    names = [base_model] if base_model else []
    names.append(model)
    for name in list(names):
        if "/" in name:
            names.append(name.split("/", 1)[1])
    return list(dict.fromkeys(names))


def list_price(model: str, base_model: str | None = None) -> Price | None:
    """The deployment's list price from the bundled map, or None when none of its names is in
    it (an Azure deployment name, a self-hosted model)."""
    prices = price_map()
    for name in candidates(model, base_model):
        if name in prices:
            a, b = prices[name]
            return Price(per_million(a), per_million(b), f"{PRICE_SOURCE}, {name!r}")
    return None


def custom_price(*mappings: dict[str, Any]) -> Price | None:
    """LiteLLM's custom pricing on a deployment (`input_cost_per_token` and
    `output_cost_per_token`, in litellm_params or model_info), if both are numbers."""
    for mapping in mappings:
        values = [mapping.get(key) for key in COST_KEYS]
        if all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in values):
            return Price(per_million(values[0]), per_million(values[1]), "custom pricing")
    return None
