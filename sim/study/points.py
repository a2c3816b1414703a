"""A sweep's point types: the point (its overrides, replication and seed, and the name of its
stored part) and the tables one point gives.

Apart from `sim.study.sweep` (which expands and runs points) so that the executors, the output
layer's store and the sweep can all name a point without importing one another.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its index in the plan, overrides by key path, replication, seed."""

    index: int
    overrides: dict[str, Any]
    replication: int
    seed: int

    def label(self) -> str:
        """`key=value, ...` for progress lines and figures."""
        parts = [f"{k}={v}" for k, v in self.overrides.items()]
        return ", ".join([*parts, f"rep {self.replication}"])

    def key(self, inputs: str = "") -> str:
        """A stable name for the point's stored part: its index and a hash of its coordinates
        and of `inputs` (the store passes the fingerprint of everything else that makes the
        numbers), so a part is never mistaken for another point's or another sweep's."""
        text = json.dumps(
            [inputs, self.overrides, self.replication, self.seed], sort_keys=True, default=str
        )
        return f"{self.index:05d}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


@dataclass
class PointResult:
    """The tables of one point, tagged with its coordinates."""

    point: SweepPoint
    summary: pd.DataFrame
    requests: pd.DataFrame
    wall_s: float = 0.0
