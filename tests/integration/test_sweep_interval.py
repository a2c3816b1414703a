"""A real sweep's hit-rate band (`sim.sweep`): binomial within a point whose replications agree,
wide across points of different laws."""

from __future__ import annotations

import copy
from typing import Any

import pandas as pd
import pytest

import sim
from sim.analysis.aggregate import aggregate_replications
from sim.analysis.analytic import wilson_interval
from sim.model.scenario import scenario_from_dict


def _width(lo: float, hi: float) -> float:
    return hi - lo


def _two_point_sweep(contract_data: dict[str, Any]) -> pd.DataFrame:
    """wait on the contract at 24 slots (overloaded) and 512 (idle), 2 replications, 300 runs."""
    data = copy.deepcopy(contract_data)
    data["sweep"] = {"grid": {"providers.direct.concurrency": [24, 512]}, "replications": 2}
    result = sim.sweep(scenario_from_dict(data), requests=300, policies=["wait"])
    return result.summary


def test_a_real_sweep_band_is_binomial_within_a_point_and_wide_across_laws(
    contract_data: dict[str, Any],
) -> None:
    stacked = _two_point_sweep(contract_data)
    key = "providers.direct.concurrency"
    same = aggregate_replications(stacked, [key]).set_index(key).loc[512]
    successes = round(same["hit_rate"] * same["runs"])
    binomial = _width(*wilson_interval(successes, int(same["runs"])))
    # The seeded replications at 512 slots agree within noise (phi < 1 on these draws), so the
    # band is the pooled binomial one exactly.
    assert same["hit_rate_ci"] == "wilson"
    assert _width(same["hit_rate_lo"], same["hit_rate_hi"]) == pytest.approx(binomial)
    # The same four runs' tables, the two concurrencies labelled as replications of one point:
    # truly different laws (hit rate ~9% vs ~83%), and the band must say so.
    mixed = stacked[stacked["replication"] == 0].assign(**{key: "mixed"})
    row = aggregate_replications(mixed, [key]).iloc[0]
    assert row["hit_rate_ci"] == "wilson+spread"
    assert row["hit_rate_dispersion"] > 10
    pooled = _width(*wilson_interval(round(row["hit_rate"] * row["runs"]), int(row["runs"])))
    assert _width(row["hit_rate_lo"], row["hit_rate_hi"]) > 4 * pooled
