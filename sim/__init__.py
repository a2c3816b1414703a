"""tailsim: will a multi-step LLM workflow meet its deadline, at what cost, and will it storm?"""

from sim.api import RunResult, nines, report, run, sweep
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from sim.model.version import __version__

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "__version__",
    "load_scenario",
    "nines",
    "report",
    "run",
    "sweep",
]
