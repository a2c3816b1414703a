"""The providers' client rules (`sdk`, `overhead_s`) on the vectorized engine, through whole
runs (`sim.run`): the default scenario with clients runs vectorized to the last bit, summaries in
chunks agree with one pass, a binding limit still goes to the event engine. The per-call
equivalence tests are tests/engine/test_vectorized_client_rules.py."""

from __future__ import annotations

import pandas as pd
import pytest

import sim
import sim.engine.choice
from sim.analysis.capacity import NONE
from sim.model.scenario import scenario_from_dict
from tests.engine.test_vectorized_client_rules import RTOL, default_with_clients


def test_the_default_scenario_with_clients_runs_vectorized_to_the_last_bit() -> None:
    """All five policies run on the vectorized engine (the `engine:` line), and the tables are
    the event engine's, bit for bit."""
    scenario = default_with_clients()
    fast = sim.run(scenario, requests=600)
    slow = sim.run(scenario, requests=600, engine="des")
    assert fast.engines == dict.fromkeys(scenario.policies, "vectorized")
    assert set(slow.engines.values()) == {"des"}
    for name in ("requests", "calls", "summary", "breakdown"):
        mine, theirs = getattr(fast, name), getattr(slow, name)
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True, obj=name)
    assert fast.calls["sdk_retry"].gt(0).any()
    assert "overhead_s" in fast.calls


def test_summaries_in_chunks_give_the_numbers_of_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summaries only, in chunks of 170 requests: each chunk draws its own rows of the client's
    streams (overhead, the SDK's waits and retry blocks)."""
    scenario = default_with_clients()
    policies = ["wait", "race", "hedge"]
    full = sim.run(scenario, requests=700, policies=policies)
    monkeypatch.setattr(sim.engine.choice, "CHUNK_REQUESTS", 170)
    tallied = sim.run(scenario, requests=700, policies=policies, records=NONE)
    assert set(tallied.engines.values()) == {"vectorized"}
    wall = [c for c in ("seconds", "wall_s") if c in full.summary]
    pd.testing.assert_frame_equal(
        full.summary.drop(columns=wall), tallied.summary.drop(columns=wall),
        check_exact=False, rtol=RTOL, check_dtype=False,
    )  # fmt: skip


def test_a_limit_that_binds_still_sends_a_client_to_the_event_engine() -> None:
    """Client rules qualify, but a slot count the calls would reach still does not."""
    data = default_with_clients().model_dump(exclude_defaults=True, mode="json")
    data["providers"]["direct"]["concurrency"] = 3
    result = sim.run(scenario_from_dict(data), requests=200, policies=["wait"])
    assert result.engines == {"wait": "des"}
    assert "concurrency" in result.engine_notes["wait"]
