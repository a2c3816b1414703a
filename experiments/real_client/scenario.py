"""The tailsim scenario equivalent to a real run, generated from the same parameters: the fake
server's slots, service law and quota, the driver's workflow and deadline, the run's own arrival
times (trace replay) and the per-call overhead measured from its logs (an empirical
distribution, not a fitted number)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

MODEL = "fake"


@dataclass(frozen=True)
class Setup:
    """The parameters shared by the fake server, the driver and the scenario."""

    slots: int = 12
    median_s: float = 0.25
    p99_s: float = 1.5
    steps: int = 3
    deadline_s: float = 2.5
    input_tokens: int = 200
    max_tokens: int = 50

    def serving(self) -> dict[str, Any]:
        """The server's service time as a serving: lognormal first token, instant generation."""
        return {
            "ttft_s": {"median": self.median_s, "p99": self.p99_s},
            "tokens_per_s": {"dist": "constant", "value": 1e12},
        }

    def workflow(self) -> dict[str, Any]:
        """`steps` sequential calls of `input_tokens` + `max_tokens` each (the server's charge)."""
        steps = []
        for k in range(self.steps):
            step: dict[str, Any] = {
                "id": f"s{k + 1}",
                "model": MODEL,
                "input_tokens": self.input_tokens,
                "output_tokens": self.max_tokens,
            }
            if k:
                step["after"] = [f"s{k}"]
            steps.append(step)
        return {"steps": steps}


def write_trace(folder: Path, arrivals_s: np.ndarray) -> str:
    """The run's arrival times (s from its first) as `arrivals.csv`; returns the file name."""
    path = folder / "arrivals.csv"
    path.write_text("t\n" + "".join(f"{t:.6f}\n" for t in arrivals_s))
    return path.name


def write_overhead(folder: Path, overhead_s: np.ndarray) -> str:
    """The measured per-call overheads as `overhead.csv` (negative clock noise clipped to
    0.1 ms); returns the file name."""
    path = folder / "overhead.csv"
    values = np.clip(overhead_s, 1e-4, None)
    path.write_text("overhead_s\n" + "".join(f"{v:.6f}\n" for v in values))
    return path.name


def provider(
    setup: Setup,
    tpm: float | None,
    sdk: str | dict | None,
    overhead_file: str | None,
    held: float,
) -> dict[str, Any]:
    """One fake deployment as a tailsim provider (bucket empty at the first arrival, as the
    server's `--start steady`)."""
    spec: dict[str, Any] = {"concurrency": setup.slots, "serves": {MODEL: setup.serving()}}
    if tpm is not None:
        spec.update({"tpm": tpm, "start": "steady", "retry_after": "seconds"})
    if sdk is not None:
        spec["sdk"] = sdk
    if overhead_file is not None:
        spec["overhead_s"] = {"dist": "empirical", "file": overhead_file, "column": "overhead_s"}
        spec["overhead_held"] = round(held, 4)
    return spec


def openai_scenario(
    setup: Setup,
    name: str,
    trace_file: str,
    tpm: float | None,
    overhead_file: str | None,
    held: float,
    *,
    presets: bool = True,
) -> dict[str, Any]:
    """The scenario of the openai-SDK driver: one provider, `sdk: openai`, a plain `wait`
    policy (the driver has no retry loop of its own: the SDK is the only one)."""
    sdk: str | dict = (
        "openai"
        if presets
        else {"retries": 2, "backoff": {"base_s": 0.5, "max_s": 8, "jitter": "full"}}
    )
    return {
        "name": name,
        "seed": 1,
        "deadline_s": setup.deadline_s,
        "arrivals": {"kind": "trace", "file": trace_file, "column": "t"},
        "models": {MODEL: {"price_per_mtok": {"input": 1.0, "output": 1.0}}},
        "providers": {"p": provider(setup, tpm, sdk, overhead_file if presets else None, held)},
        "workflow": setup.workflow(),
        "policies": {"openai": {"kind": "wait"}},
    }


def save(folder: Path, data: dict[str, Any], name: str = "scenario.yaml") -> Path:
    """Write a scenario next to its trace and overhead files."""
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
