"""`tailsim run`: every policy of a scenario on the same draws, its folder written, its
comparison printed (with the progress bars or lines while it runs; `-q` silences only those)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sim import api
from sim.api.faces import (
    FIGURE,
    ProgressLines,
    breakdown_table,
    price_note,
    run_view,
    scenario_slo,
    slo_table,
)
from sim.api.run import engines_line, folder_listing
from sim.cli.common import (
    bad_input_exits,
    err,
    executor_options,
    interrupt_between_events,
    option,
    out,
    policy_names,
    simulation_options,
    summary_table,
)


@click.command()
@simulation_options("results/<name>/<timestamp>/", FIGURE)
@option("force")
@option("engine")
@option("records")
@executor_options("policies")
def run(
    scenario: Path | None,
    out: Path | None,
    requests: int | None,
    seed: int | None,
    policies: tuple[str, ...],
    quiet: bool,
    no_plot: bool,
    force: bool,
    engine: str | None,
    records: str | None,
    executor: str,
    workers: int | None,
    scheduler: str | None,
) -> None:
    """Run every policy of SCENARIO (default: the bundled ten-step scenario) and compare them.

    With --executor processes or dask the policies run side by side, with the same results."""
    stack = _Progress(quiet)
    with bad_input_exits(), stack:
        result, folder = api.run_to_folder(
            scenario,
            out,
            force=force,
            figures=not no_plot,
            requests=requests,
            seed=seed,
            policies=policy_names(policies),
            engine=engine,
            records=records,
            executor=executor,
            workers=workers,
            scheduler=scheduler,
            progress=stack.start,
            guard=interrupt_between_events,
            notice=lambda text: err.print(text, markup=False, soft_wrap=True),  # even with -q
        )
    plan = result.plan
    _print(summary_table(result.summary, plan.deadline_s, result.seed))
    if (note := price_note(plan)) is not None:
        _print(note, markup=False, soft_wrap=True)
    view = run_view(result.summary, scenario_slo(plan))
    if view is not None:
        _print(slo_table(view))
    _print(breakdown_table(result.breakdown))
    _print(engines_line(result.engines, result.engine_notes), markup=False)
    _print(f"results: {folder}/ ({folder_listing(folder)})", markup=False)


_print = out.print


class _Progress:
    """A progress bar per policy on stderr when it is a terminal, else plain lines (each tenth
    of a policy's requests, and every half minute while it moves); nothing with -q. Started by
    the API once the policies and requests are known; stopped when the run ends."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Progress | None = None

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def start(self, names: list[str], n: int) -> Callable[[str, int], None] | None:
        """The per-policy callback for `names`, each of `n` requests (None with -q)."""
        if self.quiet:
            return None
        if not err.is_terminal:
            return ProgressLines(
                names, n, lambda line: err.print(line, markup=False, soft_wrap=True)
            )
        columns = (
            TextColumn("{task.description:>12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        bar = self.bar = Progress(*columns, console=err, transient=True)
        bar.start()
        tasks = {name: bar.add_task(name, total=n) for name in names}
        return lambda name, k: bar.advance(tasks[name], k)
