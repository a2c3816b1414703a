"""The compiled plan: a validated scenario, compiled once, that every layer above runs from.

`compile_scenario` turns a `Scenario` (the format, `sim.model.config`) into one frozen,
picklable `Plan`: serving paths with their latency laws and per-token prices, providers with
their quotas and client rules, the workflow's steps, every policy's per-step specs with its
deadline rules and the set of features it uses; `resolve` fills in the pilot's measured
thresholds (seconds per step) and `pilot_plan` is what the pilot runs. Engines, policies'
construction, the tally, the metrics and the study layer read the plan, never the scenario.
It may import `sim.policy` and `sim.model`.
"""

from sim.plan.compile import compile_scenario, recompile, resolved_data, with_seed
from sim.plan.plan import (
    FIRST_TOKEN,
    Feature,
    Measured,
    ModelPlan,
    Plan,
    PolicyPlan,
    ProviderPlan,
    ServingPlan,
)
from sim.plan.resolve import PILOT, needs_pilot, pilot_plan, resolve

__all__ = [
    "FIRST_TOKEN",
    "PILOT",
    "Feature",
    "Measured",
    "ModelPlan",
    "Plan",
    "PolicyPlan",
    "ProviderPlan",
    "ServingPlan",
    "compile_scenario",
    "needs_pilot",
    "pilot_plan",
    "recompile",
    "resolve",
    "resolved_data",
    "with_seed",
]
