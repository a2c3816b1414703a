"""`tailsim`: the command line, a thin face over the library.

Bad input exits with code 2 and a message naming the file and key path, never a traceback.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import pandas as pd
from rich.console import Console
from rich.markup import escape
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
from sim.analysis.capacity import ALL, NONE, RECORDS, check_fits, default_records, estimated_bytes
from sim.engine.choice import ENGINES
from sim.model.config import Scenario
from sim.model.errors import ScenarioError
from sim.model.scenario import (
    default_scenario_path,
    json_schema_text,
    load_scenario,
    with_overrides,
)
from sim.model.words import plural
from sim.output.explain import breakdown_table, read_breakdown
from sim.output.results import (
    FIGURE,
    check_writable,
    default_folder,
    read_result_tables,
    run_files,
    write_results,
    write_stress_results,
)
from sim.study.executors import EXECUTORS
from sim.study.progress_lines import ProgressLines
from sim.study.runner import chosen_policies
from sim.study.sweep import expand, run_points, with_engine

EXIT_BAD_INPUT = 2
#: Exit code after Ctrl-C, as shells report a command killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(sim.__version__, prog_name="tailsim")
def main() -> None:
    """Simulate multi-step LLM workflows: deadline hit rate, latency, cost and retry storms."""


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn a ScenarioError into a clear message on stderr and exit code 2, and Ctrl-C into
    exit code 130 (whatever was being written has been removed by then)."""
    try:
        yield
    except ScenarioError as exc:
        err.print("[bold red]error:[/] " + escape(exc.render()), soft_wrap=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        err.print("interrupted: no results written", markup=False)
        sys.exit(EXIT_INTERRUPTED)


@contextmanager
def _interrupt_between_events() -> Iterator[Callable[[], bool]]:
    """While simulating, Ctrl-C only raises a flag that the engine reads between events (an
    interrupt inside simpy's bookkeeping could leave it broken); outside, Ctrl-C is as usual."""
    hit = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: hit.set())
    try:
        yield hit.is_set
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit.is_set():
        raise KeyboardInterrupt


def _policy_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--policy` values: repeated (`-p wait -p race`) or comma-separated (`-p wait,race`)."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


def _simulation_options(default_out: str, figure: str) -> Callable[[Any], Any]:
    """The arguments `run` and `sweep` share: scenario, --out, --requests, --policy, ..."""

    def apply(command: Any) -> Any:
        options = [
            click.argument("scenario", required=False, type=click.Path(path_type=Path)),
            click.option(
                "--out",
                "out_dir",
                type=click.Path(path_type=Path),
                help=f"Results folder (default: {default_out}).",
            ),
            click.option(
                "--requests", "-n", type=click.IntRange(min=1), help="Override `requests`."
            ),
            click.option(
                "--policy",
                "-p",
                "policies",
                multiple=True,
                help="Run only these policies: repeat it (-p wait -p race) or separate names "
                "with commas (-p wait,race).",
            ),
            click.option("--quiet", "-q", is_flag=True, help="Print no table or progress."),
            click.option("--no-plot", is_flag=True, help=f"Skip {figure}."),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _executor_options(what: str) -> Callable[[Any], Any]:
    """--executor, --workers and --scheduler: where `what` run."""

    def apply(command: Any) -> Any:
        options = [
            click.option(
                "--executor",
                "-e",
                type=click.Choice(EXECUTORS),
                default="inline",
                show_default=True,
                help=f"Where {what} run: here, in local processes, or on dask.distributed.",
            ),
            click.option(
                "--workers",
                "-w",
                type=click.IntRange(min=1),
                help="Processes (processes, dask LocalCluster); default: the cores available.",
            ),
            click.option(
                "--scheduler",
                help="Address of an existing dask scheduler (tcp://host:8786); needs "
                "--executor dask.",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def _load(scenario: Path | None) -> tuple[str, Scenario]:
    """The scenario at `scenario` (the bundled default if None) and how to name its source."""
    source = str(scenario) if scenario is not None else str(default_scenario_path())
    return source, load_scenario(scenario)


@main.command()
@_simulation_options("results/<name>/<timestamp>/", FIGURE)
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
@_executor_options("policies")
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
    policies = _policy_names(policies)
    with bad_input_exits():
        source, spec = _load(scenario)
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
        with _progress(names, n, quiet) as tick, _interrupt_between_events() as stop:
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
        out.print(breakdown_table(result.breakdown))
        out.print(engines_line(result.engines, result.engine_notes), markup=False)
        out.print(f"results: {folder}/ ({_listing(folder)})", markup=False)


@main.command()
@_simulation_options("results/<name>/sweep-<fingerprint>/", "figures/sweep.png")
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
    from sim.output.store import SweepStore, default_sweep_folder  # noqa: PLC0415
    from sim.study.executors import Executor, WorkersLostError  # noqa: PLC0415

    with bad_input_exits():
        source, spec = _load(scenario)
        if seed is not None:
            spec = with_overrides(spec, {"seed": seed}, source=source)
        if engine is not None:  # in the scenario, so every point runs it and the store keys it
            spec = with_engine(spec, engine, source)
        if spec.sweep is None or not (spec.sweep.grid or spec.sweep.zip):
            raise ScenarioError(
                source,
                [("sweep", "missing: add `sweep: {grid: {key.path: [values]}, replications: N}`")],
            )
        policies = _policy_names(policies)
        chosen = policies or None
        chosen_policies(spec, policies, "--policy")  # unknown names stop here, before any work
        points = expand(spec)  # checks every swept key and value before any work
        folder = out_dir if out_dir is not None else default_sweep_folder(spec, requests, chosen)
        created = not folder.exists()
        with (
            Executor(executor, workers, scheduler) as pool,  # reaches a scheduler first
            SweepStore.open(  # locks the folder: a second writer is refused, naming this one
                folder,
                spec,
                points,
                requests=requests,
                policies=chosen,
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
                        policies=chosen,
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
            result = store.finish(figures=not no_plot)
    if not quiet:
        out.print(sweep_table(result.aggregate, result.keys))
        files = "summary.csv, replications.csv, requests.parquet, scenario.resolved.yaml" + (
            "" if no_plot else ", figures/"
        )
        out.print(f"results: {folder}/ ({files})", markup=False)


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


def _listing(folder: Path) -> str:
    """The files a results folder holds, as `a.csv, b.parquet, figures/x.png`."""
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    figures = folder / "figures"
    if figures.is_dir():
        names += [f"figures/{p.name}" for p in sorted(figures.iterdir())]
    return ", ".join(names)


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
            f"{row['hit_rate']:.1%} [{row['hit_rate_lo']:.1%}, {row['hit_rate_hi']:.1%}]"
            + ("*" if row.get("hit_rate_ci") == "wilson+spread" else ""),
            _num(row["p95_s"], 1),
            _num(row["cost_per_request_usd"], 4),
            _num(row["cost_per_success_usd"], 4),
            str(row["replications"]),
        )
    return table


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--svg", is_flag=True, help="Write SVG copies beside the PNGs.")
def plot(folder: Path, svg: bool) -> None:
    """Redraw every figure of FOLDER (a `tailsim run` or `tailsim sweep` folder) from its
    result files into FOLDER/figures/."""
    with bad_input_exits():
        check_results_folder(folder)
    from sim.output.plots import write_figures  # noqa: PLC0415 - slow import, on demand

    for path in write_figures(folder, svg=svg):
        out.print(f"figure: {path}", markup=False)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option(
    "--out", "out_file", type=click.Path(path_type=Path), help="Default: FOLDER/report.html."
)
def report(folder: Path, out_file: Path | None) -> None:
    """Write one self-contained report.html for FOLDER (a run or a sweep): the comparison table,
    every figure (embedded), the breakdown, the resolved scenario and a plain-language reading."""
    with bad_input_exits():
        check_results_folder(folder)
    from sim.output.report_html import write_report  # noqa: PLC0415 - slow import, on demand

    with bad_input_exits():
        path = write_report(folder, out_file)
    out.print(f"report: {path}", markup=False)


def check_results_folder(folder: Path) -> None:
    """Refuse a folder that is not a finished run or sweep folder, naming what is expected."""
    from sim.output.store import is_sweep_folder, read_sweep  # noqa: PLC0415

    if is_sweep_folder(folder):
        read_sweep(folder)  # refuses an unfinished sweep, saying how to finish it
        return
    read_result_tables(folder)


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
def explain(folder: Path) -> None:
    """Print, from the result files of a `tailsim run` in FOLDER, the comparison and why each
    policy did as it did (failures by reason and step, load per provider)."""
    with bad_input_exits():
        tables = read_result_tables(folder, need_requests=False)
        reasons = read_breakdown(folder)
        seed = json.loads((folder / "run.json").read_text(encoding="utf-8")).get("seed", "?")
    out.print(summary_table(tables.summary, tables.deadline_s, seed))
    out.print(breakdown_table(reasons))


@main.command(name="tune")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(path_type=Path),
    help="Scenario file to write: SCENARIO plus the winner as policy `tuned`.",
)
@click.option(
    "--requests",
    "-n",
    type=click.IntRange(min=20),
    help="Requests per candidate at the last rung, and in the comparison (default: `requests`).",
)
@click.option("--seed", "-s", type=click.IntRange(min=0), help="Override `seed`.")
@click.option(
    "--max-cost-per-request",
    "max_cost",
    type=click.FloatRange(min=0, min_open=True),
    help="Cost cap, USD per request (default: none).",
)
@click.option(
    "--min-quality",
    type=click.FloatRange(0, 1),
    default=0.0,
    help="Floor on the mean quality of delivered runs (default: none).",
)
@click.option("--quiet", "-q", is_flag=True, help="Print no table or progress.")
def tune_command(
    scenario: Path,
    out_file: Path,
    requests: int | None,
    seed: int | None,
    max_cost: float | None,
    min_quality: float,
    quiet: bool,
) -> None:
    """Search per-step cutoffs, hedge delays and fallback models; write SCENARIO + `tuned`."""
    from sim.study.tune import run_tune  # noqa: PLC0415 - the search's code only when tuning

    with bad_input_exits(), _tune_progress(quiet) as tick:
        outcome = run_tune(
            scenario,
            out_file,
            requests=requests,
            seed=seed,
            max_cost=max_cost,
            min_quality=min_quality,
            progress=tick,
        )
    if not quiet:
        out.print(tune_table(outcome.comparison, outcome.note))
        out.print(f"written: {out_file} (run it with: tailsim run {out_file})", markup=False)


@contextmanager
def _tune_progress(quiet: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A progress bar over the search's evaluations on stderr (lines when not a terminal)."""
    if quiet:
        yield None
        return
    if not err.is_terminal:
        last: list[str] = [""]

        def line(stage: str, done: int, total: int) -> None:
            if stage != last[0]:
                err.print(f"tune: {stage}", markup=False)
                last[0] = stage

        yield line
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("tune", total=1)

        def tick(stage: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, description=stage)

        yield tick


def tune_table(summary: pd.DataFrame, note: str) -> Table:
    """The tuned policy beside every hand-written one, on the scenario's own seed."""
    table = Table(title=note, title_justify="left")
    for header in ("policy", "valid hit rate", "hit rate", "$/request", "quality"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in summary.to_dict("records"):
        table.add_row(
            str(row["policy"]),
            f"{row['valid_hit_rate']:.2%}",
            f"{row['hit_rate']:.2%}",
            _num(row["cost_per_request_usd"], 4),
            _num(row["quality_mean"], 3),
        )
    return table


@main.command()
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option(
    "--policy", "-p", "policies", multiple=True, help="Only these policies (repeat or commas)."
)
@click.option(
    "--duration",
    "durations",
    multiple=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Burst lengths to try, s (repeat; default 60 and 120).",
)
@click.option(
    "--multiplier",
    "multipliers",
    multiple=True,
    type=click.FloatRange(min=1, min_open=True),
    help="Rate multipliers to try in turn (repeat; default 1.5 2 3 4 6 8), then bisected.",
)
@click.option(
    "--window",
    type=click.FloatRange(min=0, min_open=True),
    help="Recovery window after the burst, s (default max(60, 4 deadlines)).",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Results folder.")
@click.option("--no-plot", is_flag=True, help="Skip figures/stress.png.")
def stress(
    scenario: Path,
    policies: tuple[str, ...],
    durations: tuple[float, ...],
    multipliers: tuple[float, ...],
    window: float | None,
    out_dir: Path | None,
    no_plot: bool,
) -> None:
    """Find each policy's storm margin on SCENARIO: the largest burst (base rate x multiplier,
    held for a duration) after which its goodput is back to its pre-burst level within the
    recovery window."""
    from sim.study.stress import StressPlan, default_plan, margins  # noqa: PLC0415
    from sim.study.stress import stress as search  # noqa: PLC0415

    with bad_input_exits():
        _source, spec = _load(scenario)
        names = chosen_policies(spec, _policy_names(policies), "--policy")
        plan = default_plan(spec)
        plan = StressPlan(
            durations_s=tuple(durations) or plan.durations_s,
            multipliers=tuple(sorted(multipliers)) or plan.multipliers,
            calm_s=plan.calm_s,
            window_s=window or plan.window_s,
        )
        folder = out_dir if out_dir is not None else default_folder(spec.name, prefix="stress-")
        check_writable(folder)
        table = search(spec, names, plan)
        best = margins(table)
        write_stress_results(table, best, plan.window_s, spec.name, folder, figures=not no_plot)
    out.print(stress_table(best, plan.window_s))
    out.print(
        f"results: {folder}/ (stress.csv, margins.csv"
        + ("" if no_plot else ", figures/stress.png")
        + ")",
        markup=False,
    )


def stress_table(best: pd.DataFrame, window_s: float) -> Table:
    """Per policy and burst length: the largest burst recovered from, and the storm margin."""
    table = Table(
        title=f"storm margin: largest burst after which goodput is back within {window_s:g} s",
        title_justify="left",
    )
    for header in ("policy", "burst s", "largest x", "recovery s", "fails at x", "margin req"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    ranked = best.sort_values("margin_requests", ascending=False, kind="stable")
    for row in ranked.to_dict("records"):
        table.add_row(
            str(row["policy"]),
            f"{row['duration_s']:g}",
            f"{row['largest_multiplier']:g}",
            _num(row["recovery_s"], 0),
            "none tried" if pd.isna(row["first_failed"]) else f"{row['first_failed']:g}",
            f"{row['margin_requests']:.0f}",
        )
    return table


@main.command()
def schema() -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    click.echo(json_schema_text())


@main.command()
@click.argument("scenario", type=click.Path(path_type=Path))
def check(scenario: Path) -> None:
    """Validate SCENARIO without running it."""
    with bad_input_exits():
        spec = load_scenario(scenario)
    out.print(
        f"{scenario}: ok ({plural(len(spec.workflow.steps), 'step')}, "
        f"policies: {', '.join(spec.policies)})",
        markup=False,
    )


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


def _summaries_only_notice(spec: Scenario, n: int, names: list[str], figures: bool) -> str:
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


def summary_table(summary: pd.DataFrame, deadline_s: float, seed: int) -> Table:
    """The policies side by side, as a person reads them."""
    table = Table(
        title=f"deadline {deadline_s:g} s, seed {seed}: a run that failed (early or late) counts "
        "at the deadline in p50/p95/p99",
        title_justify="left",
    )
    headers: list[tuple[str, str]] = [
        ("policy", "left"),
        ("hit rate per run [95% CI]", "right"),
        ("customers served", "right"),
        ("p50 s", "right"),
        ("p95 s", "right"),
        ("p99 s", "right"),
        ("$/request", "right"),
        ("$/success", "right"),
        ("calls/req", "right"),
        ("429s/req", "right"),
        ("resends", "right"),
        ("quality", "right"),
    ]
    # where answers can be wrong (a validator, a quality floor), an on-time run is not yet a
    # good one: show the valid hit rate beside the hit rate, so junk delivered fast never flatters
    valid = "valid_hit_rate" in summary and bool(
        (summary["valid_hit_rate"] - summary["hit_rate"]).abs().max() > 0
    )
    if valid:
        headers.insert(2, ("valid hits", "right"))
    for header, justify in headers:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in summary.to_dict("records"):
        table.add_row(
            str(row["policy"]),
            f"{row['hit_rate']:.1%} [{row['hit_rate_lo']:.1%}, {row['hit_rate_hi']:.1%}]",
            *([f"{row['valid_hit_rate']:.1%}"] if valid else []),
            f"{row['customer_success_rate']:.1%}",
            _num(row["p50_s"], 1),
            _num(row["p95_s"], 1),
            _num(row["p99_s"], 1),
            _num(row["cost_per_request_usd"], 4),
            _num(row["cost_per_success_usd"], 4),
            _num(row["calls_per_request"], 2),
            _num(row["rate_limited_per_request"], 2),
            f"{row['retry_amplification']:.2f}x",
            _num(row["quality_mean"], 3),
        )
    return table


def _num(value: Any, digits: int) -> str:
    return "n/a" if pd.isna(value) else f"{value:.{digits}f}"


@main.command()
@click.option(
    "--size",
    type=click.IntRange(min=1000),
    default=None,
    help="Simulated requests of the base check (others scale from it); default: 20000.",
)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed (default: fixed).")
def validate(size: int | None, seed: int | None) -> None:
    """Hold the simulator to closed-form theory; print each check, exit 1 if any fails."""
    # Imported here, not at the top, so the rest of the CLI starts without the checks' code.
    import time  # noqa: PLC0415

    from sim.study.validation import (  # noqa: PLC0415
        DEFAULT_SEED,
        DEFAULT_SIZE,
        Z_TOLERANCE,
        run_checks,
    )

    size = DEFAULT_SIZE if size is None else size
    seed = DEFAULT_SEED if seed is None else seed
    started = time.perf_counter()
    results = run_checks(size=size, seed=seed)
    wall = time.perf_counter() - started
    table = Table(
        title=f"theory checks: size {size}, seed {seed}; interval = theory +- "
        f"{Z_TOLERANCE:g} standard errors (exact for invariants)",
        title_justify="left",
    )
    for header, justify in (
        ("check", "left"),
        ("theory", "right"),
        ("simulated", "right"),
        ("interval", "right"),
        ("pass/fail", "left"),
    ):
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(
            r.name,
            f"{r.theory:.5g}",
            f"{r.simulated:.5g}",
            f"[{r.lo:.5g}, {r.hi:.5g}]",
            "[green]pass[/]" if r.passed else "[bold red]FAIL[/]",
        )
    out.print(table)
    failed = [r for r in results if not r.passed]
    for r in failed:
        out.print(r.describe(), style="bold red", markup=False, soft_wrap=True)
    out.print(
        f"{len(results) - len(failed)}/{len(results)} checks passed in {wall:.1f} s "
        "(details: sim/study/validation.py)"
    )
    if failed:
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
