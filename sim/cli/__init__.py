"""`tailsim`: the command line, a thin face over the library.

Bad input exits with code 2 and a message naming the file and key path, never a traceback. The
group is here; each command lives in the module of its job (`run`, `sweep`, the folder commands,
the searches, the checks), what they share in `sim.cli.common`.
"""

from __future__ import annotations

import click

import sim
from sim.cli import checks, drive, export, fit, folders, importer, nines, run, search, sweep, synth


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(sim.__version__, prog_name="tailsim")
def main() -> None:
    """Simulate multi-step LLM workflows: deadline hit rate, latency, cost and retry storms."""


for _command in (
    run.run,
    drive.drive,
    sweep.sweep,
    folders.plot,
    folders.report,
    folders.explain,
    search.tune_command,
    search.stress,
    checks.schema,
    checks.check,
    checks.validate,
    fit.fit,
    synth.synth,
    importer.import_group,
    export.export_group,
    nines.nines,
):
    main.add_command(_command)
