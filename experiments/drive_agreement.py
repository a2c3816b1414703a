"""Is the real client code, driven in simulated time, the policy that describes it? (docs/drive.md)

`python experiments/drive_agreement.py [--requests N]` runs, at three loads (light, near the
slots, quota-bound), each pair on the same arrivals and provider draws:
- the real `AsyncOpenAI(max_retries=2, timeout=6)` (`experiments/drive_handlers.openai_wait`)
  against the YAML policy `openai-wait` (kind wait over `sdk: openai`);
- a hand-written asyncio hedge (`hand_hedge`) against the kind `hedge`;
- LiteLLM's real Router (`litellm_router` below) against the kind `router` (the scenario that
  `tailsim import litellm` makes of the same router settings).
It prints, per pair, the hit-rate difference with its paired 95% CI, and calls and 429s per
request of each side. About a minute at the default 2,000 requests per load.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from experiments.drive_handlers import MESSAGES, hand_hedge, openai_wait  # noqa: E402
from sim.api import drive  # noqa: E402
from sim.model.scenario import load_scenario, scenario_from_dict, with_overrides  # noqa: E402

SCENARIO = ROOT / "scenarios" / "drive.yaml"
#: Per load, the overrides of scenarios/drive.yaml (16 slots per provider, ~1.3 s calls).
LOADS: dict[str, dict[str, Any]] = {
    "light": {"arrivals.rate_per_s": 2.0},
    "near the slots": {"arrivals.rate_per_s": 8.0},
    "quota-bound": {"arrivals.rate_per_s": 8.0, "providers.a.tpm": 450_000,
                    "providers.b.tpm": 450_000, "providers.bare.tpm": 450_000},
}  # fmt: skip
#: The router pair: LiteLLM's defaults but for two retries and a fallback to a backup group.
ROUTER_SETTINGS: dict[str, Any] = {"num_retries": 2, "fallbacks": [{"main": ["backup"]}]}


async def litellm_router(request: Any, clients: Any) -> Any:
    """LiteLLM's Router over deployments d0 (group main) and d1 (group backup), two retries
    and a fallback: the settings of the `router` policy of `router_scenario`."""
    tpm = clients.tpm
    router = clients.litellm_router(
        [
            {"model_name": "main", "litellm_params": {**clients.deployment("d0"), "tpm": tpm}},
            {"model_name": "backup", "litellm_params": {**clients.deployment("d1"), "tpm": tpm}},
        ],
        **ROUTER_SETTINGS,
    )
    return await router.acompletion(model="main", messages=MESSAGES)


def router_scenario(overrides: dict[str, Any]) -> Any:
    """scenarios/drive.yaml's serving laws behind a LiteLLM router: d0 serves group main, d1
    group backup, each 16 slots and the load's quota; policy `router` as imported."""
    base = load_scenario(SCENARIO)
    rate = overrides.get("arrivals.rate_per_s", 8.0)
    tpm = int(overrides.get("providers.a.tpm", 2_000_000))
    law = base.providers["a"].serves["big"].model_dump(exclude_none=True, exclude_defaults=True)
    providers = {
        name: {"concurrency": 16, "tpm": tpm, "sdk": {"preset": "litellm", "retries": 0},
               "serves": {group: law}}
        for name, group in (("d0", "main"), ("d1", "backup"))
    }  # fmt: skip
    data = {
        "name": "drive-router", "seed": base.seed, "deadline_s": base.deadline_s,
        "requests": base.requests, "arrivals": {"kind": "poisson", "rate_per_s": rate},
        "billing": {"cancelled": "elapsed"},
        "models": {g: {"price_per_mtok": {"input": 2.5, "output": 10.0}}
                   for g in ("main", "backup")},
        "providers": providers,
        "workflow": {"steps": [{"id": "answer", "model": "main", "input_tokens": 2000,
                                "output_tokens": 80}]},
        "policies": {"router": {"kind": "router", "litellm_version": "1.110",
                                "deployments": {"main": [{"provider": "d0", "tpm": tpm}],
                                                "backup": [{"provider": "d1", "tpm": tpm}]},
                                "num_retries": 2, "fallbacks": {"main": ["backup"]}}},
    }  # fmt: skip
    return scenario_from_dict(data, source="drive-router"), tpm


@dataclass(frozen=True)
class Pair:
    """One handler against the policy that describes it, at one load."""

    load: str
    handler: str
    policy: str
    diff: float  # hit rate, handler minus policy (share of requests)
    half_width: float  # of the paired 95% CI of `diff`
    calls: tuple[float, float]  # calls per request: handler, policy
    limited: tuple[float, float]  # 429s per request: handler, policy


def _hits(requests: pd.DataFrame, policy: str, deadline_s: float) -> np.ndarray:
    mine = requests[requests["policy"] == policy].sort_values("request_id")
    return (mine["ok"].to_numpy(bool) & (mine["latency_s"].to_numpy() <= deadline_s)).astype(float)


def compare_pair(load: str, handler: Any, policy: str, scenario: Any, n: int) -> Pair:
    """`handler` and `policy` on the same arrivals and draws: the paired hit-rate difference."""
    result = drive(scenario, handler, requests=n, compare=[policy])
    deadline = result.plan.deadline_s
    d = _hits(result.requests, handler.__name__, deadline) - _hits(
        result.requests, policy, deadline
    )
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.inf
    s = result.summary.set_index("policy")
    name = handler.__name__
    calls = (s.at[name, "calls_per_request"], s.at[policy, "calls_per_request"])
    limited = (s.at[name, "rate_limited_per_request"], s.at[policy, "rate_limited_per_request"])
    return Pair(load, name, policy, float(d.mean()), half, calls, limited)


def pairs(n: int, loads: dict[str, dict[str, Any]] = LOADS) -> list[Pair]:
    """Every pair at every load, `n` requests each."""
    rows = []
    for load, overrides in loads.items():
        scenario = with_overrides(load_scenario(SCENARIO), overrides)
        rows.append(compare_pair(load, openai_wait, "openai-wait", scenario, n))
        rows.append(compare_pair(load, hand_hedge, "hedge", scenario, n))
        routed, tpm = router_scenario(overrides)
        rows.append(compare_pair(load, router_handler(tpm), "router", routed, n))
    return rows


def router_handler(tpm: int) -> Any:
    async def litellm_router_at(request: Any, clients: Any) -> Any:
        clients.tpm = tpm
        return await litellm_router(request, clients)

    litellm_router_at.__name__ = "litellm_router"
    return litellm_router_at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    print(f"{'load':16} {'handler':15} {'policy':12} {'hit diff [95% CI], points':28} "
          f"{'calls/req (handler, policy)':28} 429s/req (handler, policy)")  # fmt: skip
    for p in pairs(args.requests):
        lo, hi = 100 * (p.diff - p.half_width), 100 * (p.diff + p.half_width)
        ci = f"{100 * p.diff:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        calls = f"{p.calls[0]:.3f}, {p.calls[1]:.3f}"
        print(f"{p.load:16} {p.handler:15} {p.policy:12} {ci:28} {calls:28} "
              f"{p.limited[0]:.3f}, {p.limited[1]:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
