"""Golden examples: every bundled scenario runs at a small size and gives its recorded summary.

A change that moves any number of a bundled scenario fails here, so behaviour changes are
deliberate: after checking the new numbers are right, rewrite the records with
`TAILSIM_REGENERATE_GOLDEN=1 python -m pytest tests/golden` and commit them with the change.
The comparison allows 1e-9 relative difference (floating-point reassociation across platforms),
far below any statistical effect.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
import pytest

import sim

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
RECORDS = Path(__file__).resolve().parent / "records"
GOLDEN_REQUESTS = 300


def test_there_are_bundled_scenarios() -> None:
    assert {p.name for p in SCENARIOS} >= {"default.yaml", "azure-code-burst.yaml"}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_bundled_scenario_matches_its_record(path: Path) -> None:
    scenario = sim.load_scenario(path)
    summary = sim.run(scenario, requests=GOLDEN_REQUESTS).summary
    record = RECORDS / f"{path.stem}.summary.csv"
    if os.environ.get("TAILSIM_REGENERATE_GOLDEN"):
        record.parent.mkdir(parents=True, exist_ok=True)
        summary.to_csv(record, index=False)
    expected = pd.read_csv(record)
    got = pd.read_csv(io.StringIO(summary.to_csv(index=False)))  # same dtypes as the record
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, atol=0)
