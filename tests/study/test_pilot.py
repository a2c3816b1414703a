"""sim.study.pilot: 'pNN' thresholds measured on each step's successful calls in a pilot run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sim.model.errors import ScenarioError
from sim.model.latency import LogNormal
from sim.plan import needs_pilot
from tests.helpers import build, pilot_samples, plan_of, serving, step, thresholds

POLICIES = {
    "wait": {"kind": "wait", "timeout_s": 30},
    "cut": {"kind": "cut", "cutoff": "p95"},
    "hedge": {"kind": "hedge", "after": "p50"},
    "down": {"kind": "downshift", "cutoff": "p5", "to": "small"},
}


def test_constant_steps_resolve_to_their_exact_durations() -> None:
    providers = {
        "p1": {"serves": {"big": serving(ttft=1.0, tokens_per_s=100.0), "small": serving()}},
        "p2": {"serves": {"big": serving(ttft=4.0, tokens_per_s=50.0)}},
    }
    steps = [step("s1"), step("s2", "s1", provider="p2")]  # 1 + 100/100 = 2 s; 4 + 100/50 = 6 s
    scenario = build(steps, POLICIES, providers=providers)
    assert needs_pilot(plan_of(scenario))
    resolved = thresholds(scenario, 1)
    assert resolved["wait"] == {}
    for name in ("cut", "hedge", "down"):
        assert resolved[name] == {"s1": pytest.approx(2.0), "s2": pytest.approx(6.0)}


def test_only_successful_calls_count() -> None:
    # junk answers end at first token (1 s), valid ones at 2 s: a low percentile tells them apart
    providers = {"p1": {"serves": {"big": serving(invalid_rate=0.5), "small": serving()}}}
    scenario = build([step("s1")], POLICIES, providers=providers, pilot={"requests": 200})
    measured = pilot_samples(scenario, seed=2)
    sample = measured["s1"]
    assert 50 < len(sample) < 150  # about half the pilot's 200 calls were junk
    np.testing.assert_allclose(sample, 2.0)
    assert thresholds(scenario, 2)["down"]["s1"] == pytest.approx(2.0)


def test_p95_is_the_95th_percentile_of_ok_durations() -> None:
    scenario = build([step("s1"), step("s2", "s1")], POLICIES)
    sample = {"s1": np.arange(1.0, 101.0), "s2": np.array([5.0, 1.0, 3.0])}
    resolved = thresholds(scenario, 0, latencies=sample)
    assert resolved["cut"]["s1"] == pytest.approx(np.percentile(np.arange(1.0, 101.0), 95))
    assert resolved["cut"]["s1"] == pytest.approx(95.05)
    assert resolved["hedge"] == {"s1": pytest.approx(50.5), "s2": pytest.approx(3.0)}
    assert resolved["cut"]["s2"] == pytest.approx(4.8)


def test_pilot_percentile_matches_the_latency_law() -> None:
    """With no queue and constant generation, a call lasts ttft + 1 s; its pilot p95 must be the
    lognormal's 95th percentile + 1 s, within the standard error of a sample quantile."""
    n = 2000
    ttft = LogNormal.from_median_p99(1.0, 5.0)
    big = {
        "ttft_s": {"median": 1.0, "p99": 5.0},
        "tokens_per_s": {"dist": "constant", "value": 100},
    }
    providers = {"p1": {"serves": {"big": big, "small": serving()}}}
    scenario = build([step("s1")], POLICIES, providers=providers, pilot={"requests": n})
    resolved = thresholds(scenario, 11)
    law = stats.lognorm(s=ttft.sigma, scale=math.exp(ttft.mu))
    for policy, q in (("cut", 0.95), ("hedge", 0.5)):
        x = ttft.quantile(q)
        # SE of a sample q-quantile: sqrt(q(1-q)/n) / f(x_q); allow 4 SE
        se = math.sqrt(q * (1 - q) / n) / law.pdf(x)
        assert abs(resolved[policy]["s1"] - (x + 1.0)) < 4 * se


def test_pilot_is_reproducible_and_seeded() -> None:
    big = {"ttft_s": {"median": 1.0, "p99": 5.0}, "tokens_per_s": {"median": 50, "p99": 90}}
    providers = {"p1": {"serves": {"big": big, "small": serving()}}}
    scenario = build([step("s1")], POLICIES, providers=providers)
    first = thresholds(scenario, 3)
    assert thresholds(scenario, 3) == first
    assert thresholds(scenario, 4)["cut"] != first["cut"]


def test_seconds_pass_through_without_a_pilot() -> None:
    policies = {
        "wait": {"kind": "wait"},
        "cut": {"kind": "cut", "cutoff": 2.5},
        "hedge": {"kind": "hedge", "after": 1},
        "down": {"kind": "downshift", "cutoff": 4, "to": "small"},
    }
    scenario = build([step("s1"), step("s2", "s1")], policies)
    assert not needs_pilot(plan_of(scenario))
    resolved = thresholds(scenario, 0)
    assert resolved == {
        "wait": {},
        "cut": {"s1": 2.5, "s2": 2.5},
        "hedge": {"s1": 1.0, "s2": 1.0},
        "down": {"s1": 4.0, "s2": 4.0},
    }


def test_no_successful_pilot_call_names_the_policy_key() -> None:
    hopeless = {"p1": {"serves": {"big": serving(error_rate=0.999999), "small": serving()}}}
    policies = {"wait": {"kind": "wait"}, "fast": {"kind": "cut", "cutoff": "p90"}}
    scenario = build([step("s1")], policies, providers=hopeless)
    with pytest.raises(ScenarioError) as caught:
        thresholds(scenario, 0)
    (path, message) = caught.value.problems[0]
    assert path == "policies.fast.cutoff"
    assert "p90" in message
    assert "s1" in message
    assert "policies.fast.cutoff" in str(caught.value)
