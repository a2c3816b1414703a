"""The public contract example (scenario-format.md's `ten-step.yaml`) runs as written."""

from __future__ import annotations

import sim
from sim.model.scenario import (
    load_scenario,
)
from tests.helpers import REPO_ROOT

#: A verbatim copy of the public contract example (scenario-format.md's `ten-step.yaml`).
CONTRACT_COPY = REPO_ROOT / "tests" / "data" / "contract-ten-step.yaml"


def test_the_contract_example_loads_and_runs_unchanged() -> None:
    """The public example must run as written (a small run of every policy)."""
    result = sim.run(load_scenario(CONTRACT_COPY), requests=50)
    assert list(result.summary["policy"]) == ["wait", "cut", "race", "hedge", "downshift"]
    assert (result.summary["hit_rate"] > 0).all()
