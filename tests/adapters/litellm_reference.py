"""What `sim.adapters` copies from the installed LiteLLM (1.110.2, a dev dependency), computed
afresh: the bundled price subset and, per mapping of a config, LiteLLM's own keys that lie close
to a key the import reads (never taken for a typo). The tests compare the bundled copies with
these; `python tests/adapters/litellm_reference.py` rewrites sim/adapters/litellm_prices.json
and prints the neighbours to paste into sim/adapters/litellm_keys.py after an upgrade.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from difflib import get_close_matches
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm: no network

ROOT = Path(__file__).resolve().parents[2]
#: The providers whose chat models the bundled price map keeps (first-party APIs a LiteLLM
#: proxy most often fronts).
PROVIDERS = ("openai", "azure", "anthropic", "gemini", "mistral", "xai", "deepseek", "groq")
PRICE_FILE = "model_prices_and_context_window_backup.json"


def litellm_price_file() -> Path:
    """The price map inside the installed litellm package, found without importing it."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("litellm is not installed (pip install -e '.[dev]')")
    return Path(next(iter(spec.submodule_search_locations))) / PRICE_FILE


def price_subset() -> dict[str, Any]:
    """The bundled JSON: a source note and, per chat model of PROVIDERS, its two prices."""
    data = json.loads(litellm_price_file().read_text(encoding="utf-8"))
    models = {
        name: [entry["input_cost_per_token"], entry["output_cost_per_token"]]
        for name, entry in data.items()
        if isinstance(entry, dict)
        and entry.get("mode") == "chat"
        and entry.get("litellm_provider") in PROVIDERS
        and "input_cost_per_token" in entry
        and "output_cost_per_token" in entry
    }
    source = {
        "release": "litellm 1.110.2",
        "file": f"litellm/{PRICE_FILE}",
        "kept": "input_cost_per_token and output_cost_per_token (USD per token) of the chat "
        f"models of {', '.join(PROVIDERS)}",
        "license": "MIT, Copyright (c) 2023 Berri AI (sim/adapters/LICENSE-litellm.txt)",
        "regenerate": "python tests/adapters/litellm_reference.py",
    }
    return {"_source": source, "models": dict(sorted(models.items()))}


def litellm_keys() -> dict[str, set[str]]:
    """LiteLLM's own keys per mapping of a proxy config (from its types and signatures)."""
    import litellm  # noqa: PLC0415
    from litellm.constants import OPENAI_CHAT_COMPLETION_PARAMS  # noqa: PLC0415
    from litellm.proxy._types import ConfigYAML  # noqa: PLC0415
    from litellm.router_strategy.lowest_latency import RoutingArgs  # noqa: PLC0415
    from litellm.types.router import (  # noqa: PLC0415
        AllowedFailsPolicy,
        Deployment,
        LiteLLM_Params,
        RetryPolicy,
        UpdateRouterConfig,
    )
    from litellm.types.router import ModelInfo as RouterModelInfo  # noqa: PLC0415
    from litellm.types.utils import ModelInfoBase, all_litellm_params  # noqa: PLC0415

    def fields(model: Any) -> set[str]:
        return set(getattr(model, "model_fields", None) or getattr(model, "__annotations__", {}))

    completion = set(inspect.signature(litellm.completion).parameters)
    router = set(inspect.signature(litellm.Router.__init__).parameters) - {"self"}
    return {
        "top": fields(ConfigYAML),
        "deployment": fields(Deployment),
        "litellm_params": set(all_litellm_params)
        | set(OPENAI_CHAT_COMPLETION_PARAMS)
        | fields(LiteLLM_Params)
        | completion,
        "model_info": fields(RouterModelInfo) | fields(ModelInfoBase),
        "router_settings": router | fields(UpdateRouterConfig),
        # litellm_settings sets module attributes: litellm's own settings (lower case)
        "litellm_settings": {n for n in dir(litellm) if not n.startswith("_") and n == n.lower()},
        "routing_strategy_args": fields(RoutingArgs),
        "retry_policy": fields(RetryPolicy),
        "allowed_fails_policy": fields(AllowedFailsPolicy),
    }


def neighbours(reads: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Per mapping, LiteLLM's keys that are not read there but that `difflib` (as for scenario
    keys) finds close to a key that is: a config may hold them, and they are no typo."""
    keys = litellm_keys()
    out = {}
    for where, read in reads.items():
        close = {
            key
            for key in keys[where]
            if key not in read and get_close_matches(key, list(read), n=1)
        }
        out[where] = tuple(sorted(close))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from sim.adapters.litellm_keys import READS

    target = ROOT / "sim" / "adapters" / "litellm_prices.json"
    target.write_text(json.dumps(price_subset(), indent=0) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    for where, names in neighbours(READS).items():
        print(f"    {where!r}: {names!r},")
