"""`first_token_timeout_s` as a pilot percentile: 'pNN' or 'K x pNN' of the pilot's first-token
times (queue wait included, as the cut measures from the send), resolved per step as `cutoff` is
from the totals; `idle_timeout_s` stays in seconds."""

from __future__ import annotations

import numpy as np
import pytest

from sim.model.config import Scenario
from sim.plan import FIRST_TOKEN, compile_scenario, needs_pilot
from sim.policy.kinds.per_step import PerStep
from sim.policy.kinds.sequential import Sequential
from tests.helpers import build, pilot_samples, resolved_plan, serving, step


def scenario(first_token: float | str) -> Scenario:
    """Two steps under `wait` with one retry and both stream cuts."""
    providers = {"p1": {"serves": {"big": serving(ttft=0.5, stall=None) | {
        "ttft_s": {"median": 0.5, "p99": 3.0}}, "small": serving()}}}  # fmt: skip
    return build(
        [step("s1"), step("s2", "s1")],
        {"it": {"kind": "wait", "retries": 1, "first_token_timeout_s": first_token,
                "idle_timeout_s": 2.0}},
        providers=providers,
    )  # fmt: skip


def test_a_percentile_first_token_cut_is_the_pilots_first_token_percentile() -> None:
    written = scenario("1.5 x p90")
    assert needs_pilot(compile_scenario(written))
    assert not needs_pilot(compile_scenario(scenario(2.0)))
    samples = pilot_samples(written)
    policy = resolved_plan(written).runtime("it")
    assert isinstance(policy, PerStep)  # each step its own seconds, so its own runtime
    for step_id in ("s1", "s2"):
        expected = 1.5 * float(np.percentile(samples[(step_id, FIRST_TOKEN)], 90))
        runtime = policy.by_step[step_id]
        assert isinstance(runtime, Sequential)
        attempts = runtime.plans[step_id]
        assert [a.first_token_after for a in attempts] == [pytest.approx(expected, rel=1e-12)] * 2
        assert [a.idle_after for a in attempts] == [2.0, 2.0]
        # the first-token time, not the total: far below the step's total p90
        assert expected < float(np.percentile(samples[step_id], 90))
