"""`tailsim run`: every policy of a scenario on the same draws, its folder written, its
comparison printed (with the progress bars or lines while it runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import sim
from sim.analysis.capacity import ALL, NONE, RECORDS, check_fits, default_records, estimated_bytes
from sim.analysis.reading import price_note
from sim.cli.common import (
    bad_input_exits,
    err,
    executor_options,
    interrupt_between_events,
    load,
    out,
    policy_names,
    simulation_options,
    summary_table,
)
from sim.model.words import plural
from sim.output.explain import breakdown_table
from sim.output.results import FIGURE, check_writable, default_folder, run_files, write_results
from sim.output.slo_view import run_view, scenario_slo, slo_table
from sim.plan import Plan
from sim.study.progress_lines import ProgressLines
from sim.study.runner import chosen_policies


@click.command()
@simulation_options("results/<name>/<timestamp>/", FIGURE)
@click.option("--seed", "-s", type=click.IntRange(min=0), help="Override `seed`.")
@click.option("--force", is_flag=True, help="Replace what --out holds (refused otherwise).")
@click.option(
    "--engine",
    type=click.Choice(["auto", "des", "vectorized"]),
    help="Override `engine`: auto (vectorized where it gives the same numbers), des, vectorized.",
)
@click.option(
    "--records",
    type=click.Choice(RECORDS),
    help="Tables to keep: all; requests (no calls.parquet); none (summary.csv, breakdown.csv, "
    "scenario.resolved.yaml, run.json and the figure, in memory that does not grow with "
    "calls). Default: all, or none when all would need more than 2 GiB.",
)
@executor_options("policies")
def run(
    scenario: Path | None,
    out_dir: Path | None,
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
    policies = policy_names(policies)
    with bad_input_exits():
        source, spec = load(scenario)
        folder = out_dir if out_dir is not None else default_folder(spec.name)
        check_writable(folder, overwrite=force or out_dir is None)  # before any work
        n = requests or spec.requests
        names = chosen_policies(spec, policies, "--policy")  # unknown names stop here
        if records is None:
            records = default_records(spec, n, names)
            check_fits(spec, n, names, records=records)  # too big even so: only that is said
            if records != ALL:  # said even with --quiet: files the user may expect are absent
                notice = _summaries_only_notice(spec, n, names, figures=not no_plot)
                err.print(notice, markup=False, soft_wrap=True)
        with _progress(names, n, quiet) as tick, interrupt_between_events() as stop:
            result = sim.run(
                spec,
                requests=requests,
                seed=seed,
                policies=names,
                progress=tick,
                stop=stop,
                engine=engine,
                records=records,
                executor=executor,
                workers=workers,
                scheduler=scheduler,
            )
        folder = write_results(
            result,
            folder,
            source,
            sim.__version__,
            figures=not no_plot,
            overwrite=force,
            unique=out_dir is None,
        )
    if not quiet:
        out.print(summary_table(result.summary, spec.deadline_s, result.seed))
        if (note := price_note(spec)) is not None:
            out.print(note, markup=False, soft_wrap=True)
        view = run_view(result.summary, scenario_slo(spec))
        if view is not None:
            out.print(slo_table(view))
        out.print(breakdown_table(result.breakdown))
        out.print(engines_line(result.engines, result.engine_notes), markup=False)
        out.print(f"results: {folder}/ ({_listing(folder)})", markup=False)


def _listing(folder: Path) -> str:
    """The files a results folder holds, as `a.csv, b.parquet, figures/x.png`."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    figures = folder / "figures"
    if figures.is_dir():
        names += [f"figures/{p.name}" for p in sorted(figures.iterdir())]
    return ", ".join(names)


@contextmanager
def _progress(names: list[str], n: int, quiet: bool) -> Iterator[Callable[[str, int], None] | None]:
    """A progress bar per policy on stderr when it is a terminal, else plain lines (each tenth
    of a policy's requests, and every half minute while it moves)."""
    if quiet:
        yield None
        return
    if not err.is_terminal:
        yield ProgressLines(names, n, lambda line: err.print(line, markup=False, soft_wrap=True))
        return
    columns = (
        TextColumn("{task.description:>12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        tasks = {name: bar.add_task(name, total=n) for name in names}
        yield lambda name, k: bar.advance(tasks[name], k)


def _summaries_only_notice(spec: Plan, n: int, names: list[str], figures: bool) -> str:
    """Why a run keeps summaries only, the files it will write, and how to keep more."""
    need = estimated_bytes(spec, n, names, ALL) / 2**30
    *first, last = run_files(NONE, figures)
    return (
        f"note: {plural(n, 'request')} x {plural(len(names), 'policy', 'policies')} would need "
        f"about {need:.1f} GiB for every "
        f"call's record, so this run keeps summaries only (--records none): it writes "
        f"{', '.join(first)} and {last}, no requests/calls/timeseries tables. Pass --records "
        "requests (or all) to keep them."
    )


def engines_line(engines: dict[str, str], notes: dict[str, str]) -> str:
    """One line: which engine ran each policy (and why not the vectorized one)."""
    parts = [
        f"{policy}={used}" + (f" ({notes[policy]})" if used == "des" and notes.get(policy) else "")
        for policy, used in engines.items()
    ]
    return "engine: " + ", ".join(parts)
