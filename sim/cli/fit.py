"""`tailsim fit TRACES...`: calibrate providers from call logs (CSV, Parquet, OTLP JSON);
`tailsim fit --workflow TRACES`: a whole scenario inferred from workflow traces.

Reads the logs in chunks (progress on stderr), reports garbage rows by kind, fits every
(provider, model) by maximum likelihood and prints the report table; with `--out FILE` writes
the fitted `models:` / `providers:` file, the report tables and the figure beside it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from sim import api
from sim.api.faces import MODES
from sim.cli.common import EXIT_BAD_INPUT, bad_input_exits, err, option, out


@click.command("fit")
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path))
@option("workflow")
@click.option(
    "--deadline-s",
    type=click.FloatRange(min=0, min_open=True),
    help="With --workflow: the deadline to write (default: read from runs cut together).",
)
@click.option(
    "--by",
    default="provider,model",
    show_default=True,
    help="Group calls by these schema columns (comma-separated).",
)
@click.option(
    "--columns",
    "columns",
    multiple=True,
    metavar="NAME=COLUMN",
    help="Read schema column NAME from the log's COLUMN (repeat it), e.g. latency_s=duration.",
)
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path),
    help="Write the fitted YAML here, and FILE.report.csv, FILE.buckets.csv, FILE.png beside it "
    "(with --workflow: the scenario, and its providers, arrivals and report files beside it).",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="auto",
    show_default=True,
    help="first_token: first token + generation; total_time: the whole call; auto: "
    "first_token where the log has it, unless total time fits total latency better (KS).",
)
@click.option("--min-calls", type=click.IntRange(min=2), default=20, show_default=True)
@click.option("--strict", is_flag=True, help="Any garbage row: exit 2, nothing written.")
@click.option(
    "--extras/--no-extras",
    default=True,
    show_default=True,
    help="Also test bad spells, request difficulty, load slowdown, overhead and arrivals.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="No table or progress.")
def fit(
    traces: tuple[Path, ...],
    workflow: Path | None,
    deadline_s: float | None,
    by: str,
    columns: tuple[str, ...],
    out_file: Path | None,
    mode: str,
    min_calls: int,
    strict: bool,
    extras: bool,
    seed: int,
    quiet: bool,
) -> None:
    """Fit first token, speed, stalls, error and junk rates and answer length per provider and
    model from call logs, each with its standard error; print how well the fit reproduces the
    log's p50 / p95 / p99 and write a `providers:` block a scenario can `include:`."""
    say = lambda line: err.print(line, markup=False, soft_wrap=True)  # noqa: E731
    if workflow is not None or deadline_s is not None:
        _workflow(traces, workflow, deadline_s, out_file, min_calls, extras, seed, say, quiet)
        return
    if not traces:
        err.print("error: give TRACES (call logs) or --workflow TRACES", markup=False)
        sys.exit(EXIT_BAD_INPUT)
    with bad_input_exits():
        try:
            fitted = api.fit(
                traces, out_file, by=by, columns=columns, mode=mode, min_calls=min_calls,
                strict=strict, extras=extras, seed=seed, say=say, progress=not quiet,
            )  # fmt: skip
        except api.StrictRejectedError:  # the rows were said; nothing written
            sys.exit(EXIT_BAD_INPUT)
    if quiet:
        return
    out.print(_table(fitted.table))
    for line in fitted.modes:
        out.print(line, markup=False, soft_wrap=True)
    if not fitted.written:
        out.print(escape(fitted.text), soft_wrap=True)
        return
    names = ", ".join(p.name for p in fitted.written)
    out.print(f"fitted: {out_file} ({names})", markup=False, soft_wrap=True)


def _workflow(
    traces: tuple[Path, ...],
    workflow: Path | None,
    deadline_s: float | None,
    out_file: Path | None,
    min_calls: int,
    extras: bool,
    seed: int,
    say: Callable[[str], None],
    quiet: bool,
) -> None:
    """`fit --workflow`: the scenario inferred from traces, its report printed."""
    if traces or workflow is None:
        err.print(
            "error: --workflow takes the traces itself (no TRACES beside it); --deadline-s "
            "needs --workflow",
            markup=False,
        )
        sys.exit(EXIT_BAD_INPUT)
    with bad_input_exits():
        fitted = api.fit_workflow(
            workflow, out_file, deadline_s=deadline_s, min_calls=min_calls, extras=extras,
            seed=seed, say=say,
        )  # fmt: skip
    if quiet:
        return
    for line in fitted.lines:
        out.print(line, markup=False, soft_wrap=True)
    if fitted.written:
        out.print(f"scenario: {out_file}", markup=False, soft_wrap=True)
    else:
        out.print(escape(fitted.scenario), soft_wrap=True)


def _table(table) -> Table:  # type: ignore[no-untyped-def]
    shown = Table(
        title="observed vs fitted latency of a successful call (s); KS: largest CDF gap",
        title_justify="left",
    )
    for header in (
        "provider",
        "model",
        "n",
        "from",
        "p50 obs/fit",
        "p95 obs/fit",
        "p99 obs/fit",
        "KS",
        "stall p x median",
        "errors",
        "junk",
        "extras",
    ):
        shown.add_column(
            header, justify="left" if header in ("provider", "model", "from", "extras") else "right"
        )
    for row in table.to_dict("records"):
        shown.add_row(
            str(row["provider"]),
            str(row["model"]),
            f"{row['n']:,}",
            str(row["fitted_from"]),
            *(f"{row[f'p{q}_obs_s']:.3g} / {row[f'p{q}_fit_s']:.3g}" for q in (50, 95, 99)),
            f"{row['ks']:.3f}",
            str(row["stall"]),
            f"{row['error_rate']:.2%}",
            f"{row['invalid_rate']:.2%}",
            str(row["extras"]),
        )
    return shown
