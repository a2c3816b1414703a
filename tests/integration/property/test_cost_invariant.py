"""The run's cost is its calls' cost: requests.parquet and calls.parquet agree, per run and per
policy, on every bundled scenario and on random ones, in both engines.

A run's cost is accumulated by the engine as its calls end (`Run.cost`), apart from the calls'
own rows, so the two tables are independent records of the same money. A deliberate bug that
left orphan calls (work still running after the edge gave up) out of the run's cost made
requests.parquet sum to $5.81 against $9.00 in calls.parquet (deadline-propagation,
`wait-orphan`, 300 requests) and passed the suite: nothing generated `propagate_deadline:
false`. Billed tokens are checked the same way, and the summary's cost per request against
the requests table (the summary itself is built from the calls).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.study.result import RunResult
from tests.helpers import REPO_ROOT
from tests.integration.property.test_deadline_properties import propagated_scenarios
from tests.integration.property.test_engine_properties import PROFILE, any_scenarios
from tests.integration.property.test_vectorized_equivalence import qualifying_scenarios

BUNDLED = sorted((REPO_ROOT / "scenarios").glob("*.yaml"))
#: Requests per bundled scenario: enough for orphans, re-sends, 429s and tool steps to happen.
BUNDLED_REQUESTS = 60
#: Bundled scenarios whose every policy the vectorized engine runs (so its case is not empty).
VECTORIZED_BUNDLED = {"default", "azure-code-burst"}
#: Relative tolerance of two sums of the same float costs in another order.
RTOL = 1e-9
KEYS = ["policy", "request_id", "resend"]


def assert_costs_add_up(result: RunResult) -> None:
    """Per run and per policy: the run's cost and billed tokens equal those of its calls (zero
    for a run without calls); the summary's cost per request times its requests equals the
    requests table's total (when no warm-up leaves requests out of the summary)."""
    calls = result.calls.assign(tokens=result.calls["input_tokens"] + result.calls["output_tokens"])
    per_run = calls.groupby(KEYS).agg(call_cost=("cost_usd", "sum"), call_tokens=("tokens", "sum"))
    runs = result.requests.join(per_run, on=KEYS).fillna({"call_cost": 0.0, "call_tokens": 0})
    np.testing.assert_allclose(runs["cost_usd"], runs["call_cost"], rtol=RTOL, atol=1e-12)
    assert (runs["tokens"] == runs["call_tokens"]).all()
    totals = pd.DataFrame(
        {
            "requests": result.requests.groupby("policy")["cost_usd"].sum(),
            "calls": calls.groupby("policy")["cost_usd"].sum(),
        }
    ).fillna(0.0)
    for policy, row in totals.iterrows():
        assert math.isclose(row["requests"], row["calls"], rel_tol=RTOL, abs_tol=1e-12), (
            f"{policy}: requests ${row['requests']:.4f} vs calls ${row['calls']:.4f}"
        )
    if result.scenario.warmup_s == 0:
        for row in result.summary.itertuples():
            total = row.cost_per_request_usd * row.requests
            assert math.isclose(
                total, totals.loc[row.policy, "requests"], rel_tol=RTOL, abs_tol=1e-12
            ), row.policy


# ----------------------------------------------------------------------------- bundled scenarios


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_scenario_costs_add_up_in_the_event_engine(path: Path) -> None:
    scenario = sim.load_scenario(path)
    result = sim.run(scenario, requests=BUNDLED_REQUESTS, engine="des", records="all")
    assert len(result.calls) > 0
    assert_costs_add_up(result)


@pytest.mark.parametrize("path", BUNDLED, ids=[p.stem for p in BUNDLED])
def test_bundled_scenario_costs_add_up_in_the_vectorized_engine(path: Path) -> None:
    """Every policy the vectorized engine can run (the others are the event engine's)."""
    scenario = sim.load_scenario(path)
    ran, refused = [], []
    for policy in scenario.policies:
        try:
            result = sim.run(
                scenario, requests=BUNDLED_REQUESTS, engine="vectorized", policies=[policy]
            )
        except ScenarioError as exc:
            refused.append(str(exc))
            continue
        assert set(result.engines.values()) == {"vectorized"}
        assert_costs_add_up(result)
        ran.append(policy)
    assert all("vectorized engine cannot run" in why for why in refused), refused
    if path.stem in VECTORIZED_BUNDLED:
        assert ran == list(scenario.policies)
    if not ran:
        pytest.skip(f"the vectorized engine runs no policy of {path.name}")


def test_orphan_calls_are_in_the_runs_cost() -> None:
    """The issue's case: deadline-propagation at 300 requests, where `wait-orphan`'s runs
    leave calls running past their deadline; they are billed and in the run's cost."""
    scenario = sim.load_scenario(REPO_ROOT / "scenarios" / "deadline-propagation.yaml")
    result = sim.run(scenario, requests=300, policies=["wait-orphan"], engine="des")
    assert result.calls["orphan"].sum() > 50
    assert result.calls.loc[result.calls["orphan"], "cost_usd"].sum() > 1.0  # USD
    assert_costs_add_up(result)


# ----------------------------------------------------------------------------- random scenarios


@st.composite
def orphaning_scenarios(draw: st.DrawFn) -> Scenario:
    """A random scenario (contention, quotas, re-sends; or step budgets, admission, SDK
    retries, tool steps) whose policies may each not propagate the deadline, with maybe an
    adaptive and a draft policy, and maybe a priced validator on the first step."""
    base = draw(st.one_of(any_scenarios(), propagated_scenarios()))
    data = base.model_dump(mode="json", exclude_none=True)
    policies = data["policies"]
    if draw(st.booleans()):
        policies["adaptive"] = {
            "kind": "adaptive",
            "cutoff": draw(st.floats(min_value=0.5, max_value=20.0)),
            "fall_down": "small",
            "attempts": draw(st.integers(min_value=2, max_value=3)),
        }
    if draw(st.booleans()):
        policies["draft"] = {
            "kind": "draft",
            "model": "small",
            "upgrade_within": draw(st.floats(min_value=0.5, max_value=20.0)),
        }
    for spec in policies.values():
        spec["propagate_deadline"] = draw(st.booleans())
    first = data["workflow"]["steps"][0]
    if draw(st.booleans()) and first.get("kind", "llm") == "llm":
        first["validator"] = {"catches": 0.9, "latency_s": 0.2, "cost": 0.001}
    return Scenario.model_validate(data)


@pytest.mark.slow
@settings(PROFILE, max_examples=30)
@given(
    scenario=orphaning_scenarios(),
    n=st.integers(min_value=20, max_value=50),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_random_scenario_costs_add_up_in_the_event_engine(
    scenario: Scenario, n: int, seed: int
) -> None:
    assert_costs_add_up(sim.run(scenario, requests=n, seed=seed, engine="des"))


@pytest.mark.slow
@settings(PROFILE, max_examples=20)
@given(
    scenario=qualifying_scenarios(),
    n=st.integers(min_value=15, max_value=50),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_random_scenario_costs_add_up_in_the_vectorized_engine(
    scenario: Scenario, n: int, seed: int
) -> None:
    result = sim.run(scenario, requests=n, seed=seed, engine="vectorized")
    assert set(result.engines.values()) == {"vectorized"}
    assert_costs_add_up(result)
