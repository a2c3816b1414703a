"""sim.study.stress: bursts built on common random numbers and the margin search. The command
(`tailsim stress`, and `tailsim run`'s storm files) is in tests/integration/test_stress.py."""

from __future__ import annotations

import numpy as np
import pandas as pd

import sim
from sim.model.arrivals import arrival_times
from sim.model.streams import Streams
from sim.plan import compile_scenario
from sim.study.stress import burst_scenario, margins
from tests.helpers import REPO_ROOT

STORM = REPO_ROOT / "scenarios" / "retry-storm.yaml"


def test_bursts_share_their_calm_arrivals() -> None:
    """Two burst sizes: the same arrivals up to the burst (common random numbers), more in it."""
    scenario = sim.load_scenario(STORM)
    small, n_small, burst = burst_scenario(compile_scenario(scenario), 1.5, 60, 120, 200)
    big, n_big, _ = burst_scenario(compile_scenario(scenario), 4.0, 60, 120, 200)
    assert burst == (120, 180)
    assert n_big > n_small
    rng = Streams(1, "main")
    a = arrival_times(small.arrivals, n_small, rng.generator("arrivals"))
    b = arrival_times(big.arrivals, n_big, rng.generator("arrivals"))
    before = a[a < 120]
    np.testing.assert_array_equal(before, b[: len(before)])
    assert (b < 180).sum() - (a < 180).sum() > 60


def test_margins_take_the_largest_burst_below_the_first_failure() -> None:
    table = pd.DataFrame(
        {
            "policy": ["p"] * 4,
            "duration_s": [60.0] * 4,
            "multiplier": [1.5, 2.0, 3.0, 4.0],
            "extra_requests": [30.0, 60.0, 120.0, 180.0],
            "recovery_s": [0.0, 10.0, float("inf"), 20.0],
            "recovered": [True, True, False, True],
        }
    )
    row = margins(table).iloc[0]
    assert row["largest_multiplier"] == 2.0
    assert row["first_failed"] == 3.0
    assert row["recovery_s"] == 10.0
    assert row["margin_requests"] == 60.0
