"""tailsim: will a multi-step LLM workflow meet its deadline, at what cost, and will it storm?"""

from sim.api import (
    RunResult,
    SweepResult,
    check,
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

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "SweepResult",
    "__version__",
    "check",
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
