"""`synth --traces` then `fit --workflow` on a loop (a geometric count, capped) and on a map with
a branch (three copies joined, then a step run with probability 0.3): the structure comes back
(the loop's count law within SE, the map's count exactly, the branch's probability within SE)
and the inferred scenario, run on the traced arrivals, meets the traces' hit rate. Small sizes
here; the percentiles at 2,500 runs are in test_fit_workflow_round_trip.py (slow)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim import api
from sim.calibration.workflow_fit import censored_law
from tests.integration.test_fit_workflow import chain

#: The loop: geometric with mean 2.5 (p = 0.4) counting from 1, capped at 8.
LOOP_MEAN, LOOP_MAX = 2.5, 8
#: The map's copies and the branch's probability.
MAP_COPIES, BRANCH_P = 3, 0.3
#: Half-width of the statistical checks, in standard errors (a correct fit fails one by chance
#: with probability ~6e-5; seeds fixed).
Z = 4.0


def loop(**extra: Any) -> dict[str, Any]:
    """The chain with s1 a geometric loop (mean 2.5, at most 8) under a 60 s deadline (~98%
    of runs meet it, so p95 is below the deadline and says something)."""
    scenario = chain(**extra)
    scenario["deadline_s"] = 60.0
    scenario["workflow"]["steps"][1]["loop"] = {
        "count": {"dist": "geometric", "mean": LOOP_MEAN},
        "max": LOOP_MAX,
    }
    return scenario


def map_branch(**extra: Any) -> dict[str, Any]:
    """The chain with s1 three copies joined when all have answered, and s2 run for 30% of
    requests (the 25 s deadline)."""
    scenario = chain(**extra)
    steps = scenario["workflow"]["steps"]
    steps[1]["map"] = {"count": {"dist": "constant", "value": MAP_COPIES}, "join": "all"}
    steps[2]["when"] = {"probability": BRANCH_P}
    return scenario


SHAPES = {"loop": loop, "map_branch": map_branch}


def capped_geometric() -> tuple[np.ndarray, np.ndarray]:
    """(values 1..8, their probabilities) of the capped geometric, in closed form."""
    p = 1 / LOOP_MEAN
    law = [(1 - p) ** (k - 1) * p for k in range(1, LOOP_MAX)] + [(1 - p) ** (LOOP_MAX - 1)]
    return np.arange(1, LOOP_MAX + 1), np.array(law)


def round_trip(tmp_path: Path, shape: str, requests: int) -> tuple[Any, dict, Any, Any]:
    """Synthesize traces of the shape, fit the workflow back, run both: (fitted, inferred
    scenario as data, original summary row, inferred summary row)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SHAPES[shape](requests=requests)))
    traces = tmp_path / "t.json"
    api.synth(scenario, traces=traces)
    fitted = api.fit_workflow(traces, tmp_path / "inferred.yaml")
    inferred = yaml.safe_load((tmp_path / "inferred.yaml").read_text())
    want = api.run(scenario).summary.iloc[0]
    got = api.run(tmp_path / "inferred.yaml").summary.iloc[0]
    return fitted, inferred, want, got


def assert_structure(fitted: Any, inferred: dict, shape: str) -> None:
    """The true structure: steps and order; the loop's mean within Z SE of the capped
    geometric's (SE: the law's sd over the traces that ran the loop), its top count at most 8;
    or the map's count exactly 3 and the branch's probability within Z binomial SE."""
    steps = {s["id"]: s for s in inferred["workflow"]["steps"]}
    assert [s.get("after") for s in steps.values()] == [None, ["s0"], ["s1"]]
    report = {s["id"]: s for s in fitted.report["steps"]}
    if shape == "loop":
        count = steps["s1"]["loop"]["count"]
        assert count["dist"] == "empirical"
        assert max(count["values"]) <= LOOP_MAX
        values, law = capped_geometric()
        mean = float(law @ values)
        sd = math.sqrt(float(law @ values**2) - mean**2)
        got = float(np.dot(count["values"], count["weights"]))
        assert abs(got - mean) <= Z * sd / math.sqrt(report["s1"]["traces_present"]), got
        assert not {"map", "when"} & set(steps["s1"])
    else:
        assert steps["s1"]["map"] == {
            "count": {"dist": "empirical", "values": [MAP_COPIES], "weights": [1.0]},
            "join": "all",
        }
        reached = report["s2"]["traces_reached"]
        se = math.sqrt(BRANCH_P * (1 - BRANCH_P) / reached)
        assert steps["s2"]["when"]["probability"] == pytest.approx(BRANCH_P, abs=Z * se)
        assert "when" not in steps["s1"]
    for name in ("s0", "s2") if shape == "loop" else ("s0",):
        assert not {"loop", "map", "when"} & set(steps[name])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_small_round_trip_gives_back_the_structure_and_the_hit_rate(
    tmp_path: Path, shape: str
) -> None:
    """400 runs (seconds): the structure, and the inferred scenario's hit rate within Z SE of
    the difference of two independent binomial shares (the original's seed 3, the inferred's
    0): at ~0.98 (loop) or ~0.96 (map) over 400 runs, Z SE is 3.4 or 5.5 points. The 2-point
    and 5% percentile bounds need the 2,500 runs of the slow test."""
    fitted, inferred, want, got = round_trip(tmp_path, shape, requests=400)
    assert fitted.report["hit_rate"] == pytest.approx(want["hit_rate"], abs=1e-9)
    assert_structure(fitted, inferred, shape)
    p = want["hit_rate"]
    se = math.sqrt(2 * max(p * (1 - p), 1 / 400) / 400)
    assert abs(got["hit_rate"] - p) <= Z * se


def test_censored_law_without_cut_loops_is_the_shares_and_with_them_shifts_up() -> None:
    """Without cut loops the law is the finished counts' shares, exactly; a loop cut after 2
    iterations (N >= 2) moves mass off 1 (Kaplan-Meier by hand: hazard at 1 is 1/3 with the
    cut loop at risk, at 2 it is 1/2 of the two finished loops at 2 or more, ...)."""
    done = Counter({1: 1, 2: 1, 3: 1})
    assert censored_law(done, Counter()) == {
        "dist": "empirical",
        "values": [1, 2, 3],
        "weights": [0.333333, 0.333333, 0.333333],
    }
    law = censored_law(done, Counter({2: 1}))
    # at 1: 4 at risk, 1 ends (1/4); at 2: 2 at risk (the cut one is not), 1 ends: 3/4 * 1/2;
    # at 3: 1 at risk, it ends: the rest, 3/8
    assert law["values"] == [1, 2, 3]
    assert law["weights"] == pytest.approx([0.25, 0.375, 0.375], abs=1e-6)
    # a loop cut past every finished count keeps the rest at its count (a lower bound)
    assert censored_law(Counter({1: 1}), Counter({5: 1}))["weights"] == [0.5, 0.5]
