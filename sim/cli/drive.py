"""`tailsim drive`: a team's own async request handler run against the scenario's simulated
providers in simulated time, its tables written as `tailsim run` writes them, optionally beside
the scenario's policies (`--compare`)."""

from __future__ import annotations

from pathlib import Path

import click

from sim import api
from sim.api.faces import breakdown_table
from sim.api.run import folder_listing
from sim.cli.common import bad_input_exits, option, out, policy_names, summary_table
from sim.cli.run import _Progress


@click.command()
@click.argument("scenario", type=click.Path(path_type=Path))
@click.argument("handler")
@option("out", default="results/<name>/<timestamp>/")
@option("requests")
@option("seed")
@option("quiet")
@click.option("--compare", "compare", is_flag=True,
              help="Also run the scenario's policies (or those named with --policy) on the "
                   "same arrivals and provider draws, side by side.")  # fmt: skip
@option("policies")
@click.option("--name", default=None, help="The handler's policy name (default: its function's).")
@click.option("--no-plot", "no_plot", is_flag=True, help="Write no figures.")
@option("force")
def drive(
    scenario: Path,
    handler: str,
    out: Path | None,
    requests: int | None,
    seed: int | None,
    quiet: bool,
    compare: bool,
    policies: tuple[str, ...],
    name: str | None,
    no_plot: bool,
    force: bool,
) -> None:
    """Run HANDLER (package.module:function or file.py:function, an `async def
    handle(request, clients)`) for every arrival of SCENARIO, with real openai, anthropic or
    LiteLLM clients pointed at its simulated providers, in simulated time (docs/drive.md)."""
    stack = _Progress(quiet)
    chosen: list[str] | bool = list(policy_names(policies)) if policies else compare
    with bad_input_exits(), stack:
        result, folder = api.drive_to_folder(
            scenario, handler, out, force=force, figures=not no_plot, name=name,
            requests=requests, seed=seed, compare=chosen, progress=stack.start,
        )  # fmt: skip
    _print(summary_table(result.summary, result.plan.deadline_s, result.seed))
    _print(breakdown_table(result.breakdown))
    _print(f"results: {folder}/ ({folder_listing(folder)})", markup=False)


_print = out.print
