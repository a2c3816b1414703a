"""tailsim: will a multi-step LLM workflow meet its deadline, at what cost, and will it storm?

The public names load on first use (PEP 562), so importing a part of the package (a sweep's
worker imports `sim.study.sweep`) does not load the whole face (`sim.api`: result folders,
figures on demand, rare-event estimation).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.api import (
        RunResult,
        SweepResult,
        check,
        drive,
        fit,
        nines,
        report,
        run,
        stress,
        sweep,
        sweep_stored,
        synth,
        tune,
    )
    from sim.model.config import Scenario
    from sim.model.errors import ScenarioError
    from sim.model.scenario import load_scenario
    from sim.model.version import __version__

_API = ("RunResult", "SweepResult", "check", "drive", "fit", "nines", "report", "run", "stress",
        "sweep", "sweep_stored", "synth", "tune")  # fmt: skip
#: Each public name and the module that defines it.
_HOMES = {
    **dict.fromkeys(_API, "sim.api"),
    "Scenario": "sim.model.config",
    "ScenarioError": "sim.model.errors",
    "load_scenario": "sim.model.scenario",
    "__version__": "sim.model.version",
}

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "SweepResult",
    "__version__",
    "check",
    "drive",
    "fit",
    "load_scenario",
    "nines",
    "report",
    "run",
    "stress",
    "sweep",
    "sweep_stored",
    "synth",
    "tune",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
