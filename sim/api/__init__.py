"""The library's face: a typed function for everything a `tailsim` command does, so a notebook
can do all of it (`sim.cli` is a thin face over this package and imports nothing else of sim).

Every function takes its scenario as a YAML path, a `Scenario`, a compiled `Plan` or None (the
bundled default), and refuses anything else with a `ScenarioError`. The options they share are
declared once in `sim.api.options`. The modules: `run` and `sweeps` (in memory, or written to a
folder; a stored sweep resumes), `checks` (check, schema, validate), `folders` (plot, report,
explain), `searches` (tune, stress), `rare` (nines), `calibration` (fit, synth), `workflow`
(fit_workflow), `imports`
(import_litellm), `drive` (the user's handler in simulated time), `exports` (export_openai),
`testing` (the pytest fixture); `faces` re-exports what a face prints with.
"""

from sim.api.calibration import Fitted, StrictRejectedError, fit, synth
from sim.api.checks import Validation, check, schema, validate
from sim.api.drive import drive, drive_to_folder, load_handler
from sim.api.exports import export_openai
from sim.api.folders import Explained, check_results_folder, explain, plot, report
from sim.api.imports import LitellmImport, import_litellm
from sim.api.inputs import ScenarioLike, plan_of
from sim.api.options import OPTIONS, Option
from sim.api.rare import nines, nines_to_folder
from sim.api.results import RunResult, SweepResult
from sim.api.run import chosen_policies, run, run_to_folder
from sim.api.searches import Stressed, stress, tune
from sim.api.sweeps import SweepInterrupted, sweep, sweep_plan, sweep_stored
from sim.api.workflow import WorkflowFitted, fit_workflow
from sim.model.errors import ScenarioError

__all__ = [
    "OPTIONS",
    "Explained",
    "Fitted",
    "LitellmImport",
    "Option",
    "RunResult",
    "ScenarioError",
    "ScenarioLike",
    "Stressed",
    "StrictRejectedError",
    "SweepInterrupted",
    "SweepResult",
    "Validation",
    "WorkflowFitted",
    "check",
    "check_results_folder",
    "chosen_policies",
    "drive",
    "drive_to_folder",
    "explain",
    "export_openai",
    "fit",
    "fit_workflow",
    "import_litellm",
    "load_handler",
    "nines",
    "nines_to_folder",
    "plan_of",
    "plot",
    "report",
    "run",
    "run_to_folder",
    "schema",
    "stress",
    "sweep",
    "sweep_plan",
    "sweep_stored",
    "synth",
    "tune",
    "validate",
]
