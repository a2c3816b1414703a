"""The engine choice on whole runs (`sim.run`, `tailsim run --engine`): the default scenario runs
vectorized under auto, binding slots and quotas fall back to the event engine (forcing the
vectorized one is an error), forcing des gives the same numbers, the scenario's `engine` key,
and the CLI's option as run.json and the printed line record it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import sim
from sim.cli import main
from sim.engine import qualify
from sim.model.errors import ScenarioError
from sim.model.scenario import scenario_from_dict
from sim.plan import compile_scenario
from tests.engine.test_vectorized import exact, tail_scenario
from tests.helpers import build, scenario_dict, step

# ---------------------------------------------------------------- exact ties (constant latencies)


# ---------------------------------------------------------------- qualification


def test_the_default_scenario_runs_vectorized_under_auto() -> None:
    scenario = sim.load_scenario()
    assert scenario.engine == "auto"
    for name in scenario.policies:
        assert qualify.qualifies(compile_scenario(scenario).policies[name]) == (True, "")
    result = sim.run(scenario, requests=200)
    assert set(result.engines.values()) == {"vectorized"}


# ---------------------------------------------------------------- limits replayed on the calls


def test_binding_slots_fall_back_to_the_event_engine_and_forcing_is_an_error() -> None:
    data = scenario_dict(
        [step("s1")],
        {"wait": {"kind": "wait"}},
        arrivals={"kind": "poisson", "rate_per_s": 5.0},
    )
    data["providers"]["p1"]["concurrency"] = 2
    scenario = scenario_from_dict(data)
    auto = sim.run(scenario, requests=100)
    assert auto.engines == {"wait": "des"}
    assert "concurrency" in auto.engine_notes["wait"]
    assert (auto.requests["latency_s"] > 2.0 + 1e-9).any()  # it did queue: the limit was real
    with pytest.raises(ScenarioError, match="concurrency"):
        sim.run(scenario, requests=100, engine="vectorized")
    data["providers"]["p1"]["concurrency"] = 50
    roomy = sim.run(scenario_from_dict(data), requests=100)
    assert roomy.engines == {"wait": "vectorized"}


@pytest.mark.parametrize(("key", "tight", "roomy"), [("tpm", 30_000, 100_000), ("rpm", 25, 200)])
def test_binding_quotas_fall_back(key: str, tight: int, roomy: int) -> None:
    """100 calls of 1100 tokens at 5/s take 20 s: 110k tokens and 100 requests in all."""
    data = scenario_dict(
        [step("s1")], {"wait": {"kind": "wait"}}, arrivals={"kind": "poisson", "rate_per_s": 5.0}
    )
    data["providers"]["p1"][key] = tight
    assert sim.run(scenario_from_dict(data), requests=100).engines == {"wait": "des"}
    data["providers"]["p1"][key] = roomy
    assert sim.run(scenario_from_dict(data), requests=100).engines == {"wait": "vectorized"}


def test_forcing_des_runs_the_event_engine_with_the_same_numbers() -> None:
    scenario = tail_scenario()
    fast = sim.run(scenario, requests=150, policies=["race_full", "hedge_percentile"])
    slow = sim.run(scenario, requests=150, policies=["race_full", "hedge_percentile"], engine="des")
    assert set(fast.engines.values()) == {"vectorized"}
    assert set(slow.engines.values()) == {"des"}
    pd.testing.assert_frame_equal(fast.summary, slow.summary, check_exact=False, rtol=1e-9)


def test_engine_key_in_the_scenario() -> None:
    scenario = exact({"wait": {"kind": "wait"}}, engine="des")
    assert sim.run(scenario, requests=5).engines == {"wait": "des"}
    with pytest.raises(ScenarioError):
        build([step("s1")], {"wait": {"kind": "wait"}}, engine="fast")


def test_cli_engine_option_run_json_and_printed_line(tmp_path: Path, write_yaml: Any) -> None:
    data = scenario_dict([step("s1")], {"wait": {"kind": "wait"}})
    path = write_yaml(data)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(out), "--no-plot"])
    assert result.exit_code == 0, result.output
    assert "engine: wait=vectorized" in result.output
    assert json.loads((out / "run.json").read_text())["engines"] == {"wait": "vectorized"}
    args = ["run", str(path), "--out", str(out), "--no-plot", "--force", "--engine", "des"]
    result = CliRunner().invoke(main, args)
    assert "engine: wait=des" in result.output
    data["customers"] = {"retry": {"probability": 0.5, "max": 1}}
    forced = ["run", str(write_yaml(data)), "--out", str(tmp_path / "x"), "--engine", "vectorized"]
    result = CliRunner().invoke(main, forced)
    assert result.exit_code == 2
