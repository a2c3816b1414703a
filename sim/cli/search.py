"""The commands that search over many runs of a scenario: `tune` (per-step cutoffs, hedge
delays and fallbacks) and `stress` (each policy's storm margin)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim import api
from sim.api.faces import margin_text, percent, run_view, slo_table, stress_words
from sim.api.searches import check_lines
from sim.cli.common import bad_input_exits, err, num, option, out, policy_names


@click.command(name="tune")
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
@option("seed")
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
@click.option(
    "--slo-target",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Find the cheapest candidate whose 95% CI of the success share is wholly at or above "
    "this (0.9999: four nines); default: the scenario's `slo`, else the highest valid hit rate.",
)
@click.option(
    "--nines-budget-s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="With an SLO plain runs of --requests cannot resolve: seconds for `tailsim nines` "
    "(importance sampling) to judge the search's finalists; 0: plain runs only.",
)
@click.option("--quiet", "-q", is_flag=True, help="Print no table or progress.")
def tune_command(
    scenario: Path,
    out_file: Path,
    requests: int | None,
    seed: int | None,
    max_cost: float | None,
    min_quality: float,
    slo_target: float | None,
    nines_budget_s: float,
    quiet: bool,
) -> None:
    """Search per-step cutoffs, hedge delays and fallback models; write SCENARIO + `tuned`."""
    with bad_input_exits(), _tune_progress(quiet) as tick:
        outcome = api.tune(
            scenario,
            out_file,
            requests=requests,
            seed=seed,
            max_cost=max_cost,
            min_quality=min_quality,
            progress=tick,
            slo_target=slo_target,
            nines_budget_s=nines_budget_s,
        )
    if not quiet:
        out.print(tune_table(outcome.comparison, outcome.note, outcome.slo))
        for line in check_lines(outcome):
            out.print(line, markup=False)
        view = run_view(outcome.comparison, outcome.slo)
        if view is not None:
            out.print(slo_table(view))
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


def tune_table(summary: pd.DataFrame, note: str, slo: tuple[float, str] | None = None) -> Table:
    """The tuned policy beside every hand-written one, on the scenario's own seed (a share never
    printed across the SLO's target: the SLO table below reads the same figures)."""
    bounds = (slo[0],) if slo else ()
    table = Table(title=note, title_justify="left")
    for header in ("policy", "valid hit rate", "hit rate", "$/request", "quality"):
        table.add_column(header, justify="left" if header == "policy" else "right")
    for row in summary.to_dict("records"):
        table.add_row(
            str(row["policy"]),
            percent(row["valid_hit_rate"], 2, bounds),
            percent(row["hit_rate"], 2, bounds),
            num(row["cost_per_request_usd"], 4),
            num(row["quality_mean"], 3),
        )
    return table


@click.command()
@click.argument("scenario", type=click.Path(path_type=Path))
@option("policies")
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
    with bad_input_exits():
        done = api.stress(
            scenario, policy_names(policies) or None, durations=durations,
            multipliers=multipliers, window=window, out=out_dir, figures=not no_plot,
        )  # fmt: skip
    out.print(stress_table(done.margins, done.plan.window_s))
    for line in stress_words(done.margins)[1]:
        out.print(line, markup=False, soft_wrap=True)
    out.print(
        f"results: {done.folder}/ (stress.csv, margins.csv"
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
    open_ended = stress_words(best)[0]  # a margin no burst tried beat: '>= N'
    for row in ranked.to_dict("records"):
        failed = not pd.isna(row["first_failed"])
        table.add_row(
            str(row["policy"]),
            f"{row['duration_s']:g}",
            f"{'' if failed else '>= '}{row['largest_multiplier']:g}",
            num(row["recovery_s"], 0),
            f"{row['first_failed']:g}" if failed else "none failed",
            margin_text(row["margin_requests"], str(row["policy"]) not in open_ended),
        )
    return table
