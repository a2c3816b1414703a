"""`tailsim fit TRACES...`: calibrate providers from call logs (CSV, Parquet, OTLP JSON).

Reads the logs in chunks (progress on stderr), reports garbage rows by kind, fits every
(provider, model) by maximum likelihood and prints the report table; with `--out FILE` writes
the fitted `models:` / `providers:` file, the report tables and the figure beside it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from sim.calibration.extras import fit_extras
from sim.calibration.log_readers import parse_columns, read_call_logs
from sim.calibration.plots import fit_figure
from sim.calibration.report import (
    MODES,
    bucket_table,
    extras_summary,
    fit_calls,
    fitted_yaml,
    mode_lines,
    refit_outside_spells,
    report_table,
    sample_files,
)
from sim.cli.common import EXIT_BAD_INPUT, bad_input_exits, err, out
from sim.model.errors import ScenarioError


@click.command("fit")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
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
    help="Write the fitted YAML here, and FILE.report.csv, FILE.buckets.csv, FILE.png beside it.",
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
    with bad_input_exits():
        groups = tuple(c.strip() for c in by.split(",") if c.strip())
        allowed = ("provider", "model", "request_id", "status")
        for name in groups:
            if name not in allowed:
                raise ScenarioError(
                    "--by", [(name, f"unknown column (allowed: {', '.join(allowed)})")]
                )
        if out_file is not None and out_file.is_dir():
            raise ScenarioError(str(out_file), [("", "is a folder, expected a file name to write")])
        if out_file is not None and not out_file.absolute().parent.is_dir():
            raise ScenarioError(str(out_file), [("", "cannot be written: no such folder")])
        mapping = parse_columns(columns)
        last = [0.0]

        def progress(source: str, done: int, total: int) -> None:
            now = time.monotonic()
            if quiet or (now - last[0] < 1.0 and done < total):
                return
            last[0] = now
            err.print(f"fit: reading {source} {done / total:.0%}", markup=False, soft_wrap=True)

        calls, garbage = read_call_logs(list(traces), mapping, progress)
        skipped = [(src, g) for src, g in garbage.items() if g.total]
        for source, g in skipped:
            err.print(
                f"{source}: {g.total:,} of {g.rows_read:,} rows skipped"
                + (" (--strict: rejected)" if strict else ""),
                markup=False,
                soft_wrap=True,
            )
            for line in g.lines():
                err.print(f"  {line}", markup=False, soft_wrap=True)
        if strict and skipped:
            sys.exit(EXIT_BAD_INPUT)
        if calls.empty:
            raise ScenarioError(", ".join(map(str, traces)), [("", "no usable calls in the logs")])
        tick = (
            None
            if quiet
            else (lambda what: err.print(f"fit: fitting {what}", markup=False, soft_wrap=True))
        )
        fits, too_small = fit_calls(calls, groups, mode, min_calls, seed, tick)
        for line in too_small:
            err.print(f"skipped {line}", markup=False, soft_wrap=True)
        if not fits:
            raise ScenarioError(
                ", ".join(map(str, traces)), [("", f"no group has {min_calls} ok calls to fit")]
            )
        found = []
        timed = bool(calls["start_s"].notna().any())
        if extras and not timed:
            if not quiet:
                err.print("fit: no start times in the logs: extras skipped", markup=False)
            extras = False
        if extras:
            if tick is not None:
                tick("extras (spells, difficulty, load, overhead, arrivals)")
            base = {(g.fit.provider, g.fit.model): g.fit.serving_block() for g in fits}
            known = calls[
                calls["provider"].notna() & calls["model"].notna() & calls["start_s"].notna()
            ]
            known = known.reset_index(drop=True)
            found = fit_extras(known, base)
            fits = refit_outside_spells(known, fits, found, groups, mode, seed)
        table = report_table(fits, extras_summary(fits, found) if extras else None)
        buckets = bucket_table(fits)
        stem_name = out_file.stem if out_file is not None else "fitted"
        text = fitted_yaml(fits, [str(t) for t in traces], found, stem_name)
        if not quiet:
            out.print(_table(table))
            for line in mode_lines(fits):
                out.print(line, markup=False, soft_wrap=True)
        if out_file is None:
            if not quiet:
                out.print(escape(text), soft_wrap=True)
            return
        figure = fit_figure(fits, buckets)
        stem = out_file.with_suffix("")
        written = {
            out_file: text,
            stem.with_suffix(".report.csv"): table.to_csv(index=False, float_format="%.6g"),
            stem.with_suffix(".buckets.csv"): buckets.to_csv(index=False, float_format="%.6g"),
            **{out_file.with_name(n): t for n, t in sample_files(fits, stem_name).items()},
        }
        for path, content in written.items():
            temp = path.with_name(path.name + ".tmp")
            temp.write_text(content, encoding="utf-8")
            temp.replace(path)
        png = stem.with_suffix(".png")
        figure.savefig(png.with_name(png.name + ".tmp.png"), dpi=110)
        png.with_name(png.name + ".tmp.png").replace(png)
        if not quiet:
            names = ", ".join(p.name for p in [*written, png])
            out.print(f"fitted: {out_file} ({names})", markup=False, soft_wrap=True)


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
