"""The vectorized engine's handle, as a policy sees it: one step for many requests at once.

The engine layer sits above the policy layer, so a kind with a vectorized twin does not import
it: its runtime policy's `run_vector` picks one of the three ways to run attempts that the
vectorized engine implements (`sim.engine.vector_steps.VectorSteps`) and hands it the step's
plans. A kind without a twin keeps `Policy.vectorized` False and the engine refuses it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from sim.model.workflow import Step
from sim.policy.plans import Attempt


class VectorRun(Protocol):
    """The ways the vectorized engine runs a step's attempts (each returns how it ended)."""

    def in_turn(
        self, step: Step, plans: list[Attempt], rows: np.ndarray, start: np.ndarray,
        deadline: np.ndarray,
    ) -> Any:  # fmt: skip
        """One attempt at a time, each cut at its give-up time, then the next."""
        ...

    def in_rounds(
        self, step: Step, rounds: list[list[Attempt]], rows: np.ndarray, start: np.ndarray,
        deadline: np.ndarray,
    ) -> Any:  # fmt: skip
        """Rounds of attempts started together; the first valid answer wins."""
        ...

    def on_timer(
        self, step: Step, plans: list[Attempt], after: float, rows: np.ndarray,
        start: np.ndarray, deadline: np.ndarray,
    ) -> Any:  # fmt: skip
        """A primary; a further attempt `after` seconds past the last start, or on a failure."""
        ...
