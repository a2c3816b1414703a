"""tailsim: will a multi-step LLM workflow meet its deadline, at what cost, and will it storm?"""

from sim.api import report, sweep
from sim.config import Scenario
from sim.errors import ScenarioError
from sim.runner import RunResult, run
from sim.scenario import load_scenario

__all__ = [
    "RunResult",
    "Scenario",
    "ScenarioError",
    "__version__",
    "load_scenario",
    "report",
    "run",
    "sweep",
]
__version__ = "0.1.0"
