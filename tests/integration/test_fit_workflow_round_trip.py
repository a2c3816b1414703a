"""The round trip: `synth --traces` then `fit --workflow`, and the inferred scenario run on the
traced arrivals reproduces the original's end-to-end numbers (a chain, a fan-out with a join,
a geometric loop, and a map with a branch). Slow (a few thousand runs synthesized, fitted and
run again); the structure alone is checked fast in tests/integration/test_fit_workflow.py and
test_fit_workflow_loop_map.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim import api
from tests.integration.test_fit_workflow import chain, fan_out
from tests.integration.test_fit_workflow_loop_map import assert_structure, round_trip

pytestmark = pytest.mark.slow

REQUESTS = 2500


@pytest.mark.parametrize("shape", ["chain", "fan_out"])
def test_inferred_scenario_reproduces_hit_rate_and_percentiles(tmp_path: Path, shape: str) -> None:
    """Hit rate within 2 points: at ~0.97 over 2,500 runs each side's SE is ~0.0034, the
    difference's ~0.005, so 2 points is 4 SE (and the fit's own error is inside that). p50 and
    p95 within 5%: the end-to-end latency's relative SE at p95 over 2,500 runs is ~1% per side
    (sd ~2.5 s around 22 s, density-scaled), so 5% leaves room for the fitted laws' bias (the
    fit's p95 is held to its log's 99% interval). Seeds fixed: the original's 3, the inferred 0."""
    original = (chain if shape == "chain" else fan_out)(requests=REQUESTS)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(original))
    traces = tmp_path / "t.json"
    api.synth(scenario, traces=traces)
    fitted = api.fit_workflow(traces, tmp_path / "inferred.yaml")
    want = api.run(scenario).summary.iloc[0]
    got = api.run(tmp_path / "inferred.yaml").summary.iloc[0]
    assert fitted.report["hit_rate"] == pytest.approx(want["hit_rate"], abs=1e-9)
    assert abs(got["hit_rate"] - want["hit_rate"]) <= 0.02
    for q in ("p50_s", "p95_s"):
        assert got[q] == pytest.approx(want[q], rel=0.05), q


@pytest.mark.parametrize("shape", ["loop", "map_branch"])
def test_loop_and_map_with_branch_come_back_and_reproduce_the_traces(
    tmp_path: Path, shape: str
) -> None:
    """The loop (geometric, mean 2.5, at most 8; 60 s deadline, ~98% met) and the map of 3 with
    a 0.3 branch (25 s deadline, ~96% met) over 2,500 runs: the structure within SE
    (`assert_structure`); hit rate within 2 points (the difference's SE is <= 0.0056 at these
    rates, so 2 points is >= 3.5 SE); p50 and p95 within 5% (relative SE at p95 ~1-2% per side
    at 2,500 runs, the rest for the fitted laws' bias; loops cut by the deadline are counted as
    censored, without which the loop law comes back short and the hit rate 8 points high)."""
    fitted, inferred, want, got = round_trip(tmp_path, shape, requests=REQUESTS)
    assert fitted.report["hit_rate"] == pytest.approx(want["hit_rate"], abs=1e-9)
    assert_structure(fitted, inferred, shape)
    assert abs(got["hit_rate"] - want["hit_rate"]) <= 0.02
    for q in ("p50_s", "p95_s"):
        assert got[q] == pytest.approx(want[q], rel=0.05), q
