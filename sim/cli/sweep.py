"""`tailsim sweep`: a scenario's grid x replications, each point stored as it finishes
(`sim.api.sweep_stored`), so the same command again resumes; a lost worker or Ctrl-C says how
to resume. `-q` silences only the progress."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click
import pandas as pd
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from sim import api
from sim.api.faces import percent_interval, scenario_slo, slo_table, sweep_view
from sim.cli.common import (
    EXIT_INTERRUPTED,
    bad_input_exits,
    err,
    executor_options,
    num,
    option,
    out,
    policy_names,
    simulation_options,
)


@click.command()
@simulation_options("results/<name>/sweep-<fingerprint>/", "figures/sweep.png")
@executor_options("points")
@option("engine")
def sweep(
    scenario: Path | None,
    out: Path | None,
    requests: int | None,
    seed: int | None,
    policies: tuple[str, ...],
    quiet: bool,
    no_plot: bool,
    executor: str,
    workers: int | None,
    scheduler: str | None,
    engine: str | None,
) -> None:
    """Run SCENARIO's `sweep:` grid x replications, every policy at every point.

    Each point is stored as it finishes; the same command again resumes an interrupted sweep."""
    progress = _SweepProgress(quiet)
    with bad_input_exits():
        try:
            with progress:
                result, folder = api.sweep_stored(
                    scenario,
                    out,
                    requests=requests,
                    seed=seed,
                    policies=policy_names(policies) or None,
                    engine=engine,
                    executor=executor,
                    workers=workers,
                    scheduler=scheduler,
                    figures=not no_plot,
                    progress=progress.tick,
                    notice=lambda text: err.print(text, markup=False, soft_wrap=True),  # with -q
                    resume_hint=_same_command,
                )
        except api.SweepInterrupted as stopped:  # before bad_input_exits' plain Ctrl-C
            err.print(str(stopped), markup=False, soft_wrap=True)
            sys.exit(EXIT_INTERRUPTED)
    console.print(sweep_table(result.aggregate, result.keys))
    if result.plan is not None:
        slo = scenario_slo(result.plan)
        view = sweep_view(result.aggregate, result.summary, result.keys, slo)
        if view is not None:
            console.print(slo_table(view))
    files = "summary.csv, replications.csv, requests.parquet, scenario.resolved.yaml" + (
        "" if no_plot else ", figures/"
    )
    console.print(f"results: {folder}/ ({files})", markup=False)


console = out  # the parameter `out` (--out) shadows the console's name inside `sweep`


def _same_command(folder: Path) -> str:
    """The running command as the user would type it again, with `--out folder` (so it finds
    the same folder even if the default's name would change): every option given, none else."""
    ctx = click.get_current_context()
    words = ["tailsim", ctx.info_name or ""]
    for param in ctx.command.params:
        value = folder if param.name == "out" else ctx.params.get(param.name or "")
        if isinstance(param, click.Argument):
            words += [str(value)] if value is not None else []
            continue
        unset = value is None or value is False or (isinstance(value, tuple) and not value)
        if unset or (param.default is not None and value == param.default):
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            words.append(flag)
        else:
            for item in value if getattr(param, "multiple", False) else (value,):
                words += [flag, str(item)]
    return shlex.join(words)


class _SweepProgress:
    """One progress bar over the sweep's points on stderr when it is a terminal: points done
    and the time left (nothing with -q or when stderr is not a terminal)."""

    def __init__(self, quiet: bool) -> None:
        self.on = not quiet and err.is_terminal
        self.bar: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> _SweepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def tick(self, done: int, total: int, point: Any) -> None:
        """Told at the start (point None: `done` already stored) and as each point ends."""
        if not self.on:
            return
        if self.bar is None:
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("points, elapsed"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
            )
            self.bar = Progress(*columns, console=err, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total, completed=done)
        if point is not None:
            self.bar.update(self.task, completed=done, description=f"done: {point.label()}")


def sweep_table(aggregate: pd.DataFrame, keys: list[str]) -> Table:
    """Per swept point and policy: pooled hit rate with its CI, p95, cost per request and per
    success (pooled over replications)."""
    table = Table(
        title="sweep: replications pooled; hit rate 95% Wilson CI over the pooled runs, widened "
        "where the replications differ more than binomial noise (* marks those)",
        title_justify="left",
    )
    headers = [*keys, "policy", "hit rate [95% CI]", "p95 s", "$/request", "$/success", "reps"]
    for header in headers:
        table.add_column(header, justify="left" if header in ("policy", *keys) else "right")
    for row in aggregate.to_dict("records"):
        table.add_row(
            *[str(row[k]) for k in keys],
            str(row["policy"]),
            percent_interval(row["hit_rate"], row["hit_rate_lo"], row["hit_rate_hi"])
            + ("*" if row.get("hit_rate_ci") == "wilson+spread" else ""),
            num(row["p95_s"], 1),
            num(row["cost_per_request_usd"], 4),
            num(row["cost_per_success_usd"], 4),
            str(row["replications"]),
        )
    return table
