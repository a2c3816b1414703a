"""A pytest plugin: `tailsim_drive`, a fixture that runs a handler through a scenario's simulated
providers in simulated time, so a reliability test of a team's own client code takes seconds.

Loaded by the `pytest11` entry point of the installed package. The fixture is `sim.api.drive`
itself: `tailsim_drive(scenario, handler, requests=N, compare=[...])` returns the run's
`RunResult` (summary, requests, calls), e.g.
`assert result.summary.set_index("policy").at["handle", "hit_rate"] >= 0.99`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture
def tailsim_drive() -> Callable[..., Any]:
    """`sim.api.drive`: (scenario, handler, *, requests, seed, compare) -> RunResult."""
    from sim.api.drive import drive  # noqa: PLC0415 - loaded only by the tests that ask

    return drive
