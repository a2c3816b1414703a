"""`tailsim sweep`: a scenario's grid x replications, each point stored as it finishes.

The wiring of the layers: the study layer runs the points (`sim.study.sweep.run_points`) and
hands each finished one here, the output layer's store writes it (`sim.output.store`), so a
killed sweep resumes where it stopped; a lost worker or Ctrl-C says how to resume."""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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

import sim
from sim.cli.common import (
    EXIT_INTERRUPTED,
    bad_input_exits,
    err,
    load,
    num,
    out,
    policy_names,
    simulation_options,
)
from sim.engine.choice import ENGINES
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.words import percent_interval, plural
from sim.output.slo_view import scenario_slo, slo_table, sweep_view
from sim.output.store import SweepStore, default_sweep_folder
from sim.plan import Plan, recompile
from sim.study.executors import EXECUTORS, Executor, WorkersLostError
from sim.study.points import SweepPoint
from sim.study.result import SweepResult
from sim.study.runner import chosen_policies
from sim.study.sweep import expand, run_points, with_engine


@click.command()
@simulation_options("results/<name>/sweep-<fingerprint>/", "figures/sweep.png")
@click.option("--seed", "-s", type=click.IntRange(min=0), help="Override `seed`.")
@click.option(
    "--executor",
    "-e",
    type=click.Choice(EXECUTORS),
    default="inline",
    show_default=True,
    help="Where points run: here, in local processes, or on dask.distributed.",
)
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    help="Processes (processes, dask LocalCluster); default: the cores available.",
)
@click.option(
    "--scheduler",
    help="Address of an existing dask scheduler (tcp://host:8786); needs --executor dask.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    help="Override `engine` at every point, as `tailsim run --engine`: auto, des, vectorized.",
)
def sweep(
    scenario: Path | None,
    out_dir: Path | None,
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
    with bad_input_exits():
        source, spec = _sweep_scenario(scenario, seed, engine)
        policies = policy_names(policies)
        chosen = policies or None
        chosen_policies(spec, policies, "--policy")  # unknown names stop here, before any work
        points = expand(spec)  # checks every swept key and value before any work
        folder = out_dir if out_dir is not None else default_sweep_folder(spec, requests, chosen)
        result = _store_points(
            folder,
            spec,
            points,
            source,
            requests=requests,
            policies=chosen,
            pool=Executor(executor, workers, scheduler),
            quiet=quiet,
            figures=not no_plot,
        )
    if not quiet:
        out.print(sweep_table(result.aggregate, result.keys))
        slo = scenario_slo(spec)
        view = sweep_view(result.aggregate, result.summary, result.keys, slo)
        if view is not None:
            out.print(slo_table(view))
        files = "summary.csv, replications.csv, requests.parquet, scenario.resolved.yaml" + (
            "" if no_plot else ", figures/"
        )
        out.print(f"results: {folder}/ ({files})", markup=False)


def _sweep_scenario(
    scenario: Path | None, seed: int | None, engine: str | None
) -> tuple[str, Scenario]:
    """The scenario to sweep and its source, with --seed and --engine in it; refused without a
    `sweep:` grid."""
    source, spec = load(scenario)
    if seed is not None:
        spec = recompile(spec, {"seed": seed}, source=source)
    if engine is not None:  # in the scenario, so every point runs it and the store keys it
        spec = with_engine(spec, engine, source)
    if spec.sweep is None or not (spec.sweep.grid or spec.sweep.zip):
        raise ScenarioError(
            source,
            [("sweep", "missing: add `sweep: {grid: {key.path: [values]}, replications: N}`")],
        )
    return source, spec


def _store_points(
    folder: Path,
    spec: Plan,
    points: list[SweepPoint],
    source: str,
    *,
    requests: int | None,
    policies: Sequence[str] | None,
    pool: Executor,
    quiet: bool,
    figures: bool,
) -> SweepResult:
    """Run the points not yet stored in `folder` on `pool` and store each as it finishes (the
    study layer runs them, the output layer's store writes them), then the pooled tables.

    One piece, longer than most: the pool, the folder's lock and what Ctrl-C, lost workers or
    any failure leave behind (a new folder with nothing stored is removed) belong together."""
    created = not folder.exists()
    with (
        pool,  # reaches a scheduler first
        SweepStore.open(  # locks the folder: a second writer is refused, naming this one
            folder,
            spec,
            points,
            requests=requests,
            policies=policies,
            source=source,
            version=sim.__version__,
        ) as store,
    ):
        pending = store.pending()
        if len(pending) < len(points):  # said even with --quiet: it changes what runs
            err.print(
                f"resuming {folder}: {len(points) - len(pending)} of "
                f"{plural(len(points), 'point')} already finished, skipping them; "
                f"running {len(pending)}",
                markup=False,
                soft_wrap=True,
            )
        try:
            with _sweep_progress(len(points), len(points) - len(pending), quiet) as tick:

                def done(result: Any) -> None:
                    store.write_part(result)
                    if tick is not None:
                        tick(result.point)

                run_points(  # the study runs the points, the store writes each as it ends
                    pool,
                    spec,
                    pending,
                    store.keys,
                    requests=requests,
                    policies=policies,
                    on_done=done,
                )
        except KeyboardInterrupt:
            err.print(
                f"interrupted: {store.stored()} of {plural(len(points), 'point')} stored in "
                f"{folder}; run the same command again to resume",
                markup=False,
                soft_wrap=True,
            )
            sys.exit(EXIT_INTERRUPTED)
        except WorkersLostError as exc:
            stored = store.stored()
            if created and not stored:
                shutil.rmtree(folder, ignore_errors=True)
            count = plural(len(points), "point")
            line = f"{exc.what}; {stored} of {count} stored; resume with: "
            raise ScenarioError(str(folder), [("", line + _same_command(folder))]) from None
        except BaseException:
            if created and not store.done():
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return store.finish(figures=figures)


def _same_command(folder: Path) -> str:
    """The running command as the user would type it again, with `--out folder` (so it finds
    the same folder even if the default's name would change): every option given, none else."""
    ctx = click.get_current_context()
    words = ["tailsim", ctx.info_name or ""]
    for param in ctx.command.params:
        value = folder if param.name == "out_dir" else ctx.params.get(param.name or "")
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


@contextmanager
def _sweep_progress(
    total: int, already: int, quiet: bool
) -> Iterator[Callable[[Any], None] | None]:
    """One progress bar over the sweep's points on stderr when it is a terminal: points done
    and the time left."""
    if quiet or not err.is_terminal:
        yield None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points, elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("sweep", total=total, completed=already)

        def tick(point: Any) -> None:
            bar.update(task, advance=1, description=f"done: {point.label()}")

        yield tick


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
