"""Calibration from call logs: `fit` (providers fitted from CSV, Parquet or OTLP JSON logs, and
the `providers:` file written) and `synth` (a synthetic call log from a scenario, the round
trip of `fit`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.analysis.capacity import ALL
from sim.api.inputs import ScenarioLike, file_path, optional_path, plan_of
from sim.api.options import label
from sim.model.errors import ScenarioError

#: The schema columns calls may be grouped by.
GROUPS = ("provider", "model", "request_id", "status")


class StrictRejectedError(ScenarioError):
    """`strict` and the logs held garbage rows: nothing written (the rows were reported)."""


@dataclass(frozen=True)
class Fitted:
    """A fit: the report table (observed vs fitted percentiles per group), the size buckets,
    the lines saying which mode each group was fitted in, the fitted YAML, and the files
    written (none without `out`)."""

    table: pd.DataFrame
    buckets: pd.DataFrame
    modes: list[str]
    text: str
    written: list[Path]


def fit(
    traces: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    by: Sequence[str] | str = ("provider", "model"),
    columns: Sequence[str] = (),
    mode: str = "auto",
    min_calls: int = 20,
    strict: bool = False,
    extras: bool = True,
    seed: int = 0,
    say: Callable[[str], None] | None = None,
    progress: bool = True,
) -> Fitted:
    """Fit first token, speed, stalls, error and junk rates and answer length per group of
    calls from call logs, each with its standard error, and (with `out`) write the fitted
    `providers:` file a scenario can `include:`, FILE.report.csv, FILE.buckets.csv and FILE.png
    beside it. `columns`: NAME=COLUMN pairs; `say(line)` hears skipped rows and groups (and,
    with `progress`, how reading and fitting go)."""
    from sim.calibration.log_readers import parse_columns, read_call_logs  # noqa: PLC0415

    tell = say or (lambda _line: None)
    paths = [
        file_path(t, "traces") for t in ([traces] if isinstance(traces, str | Path) else traces)
    ]
    names = ", ".join(map(str, paths))
    groups = _groups(by)
    out_file = optional_path(out, "out")
    if out_file is not None and out_file.is_dir():
        raise ScenarioError(str(out_file), [("", "is a folder, expected a file name to write")])
    if out_file is not None and not out_file.absolute().parent.is_dir():
        raise ScenarioError(str(out_file), [("", "cannot be written: no such folder")])
    mapping = parse_columns(list(columns))
    last = [0.0]

    def reading(source: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not progress or (now - last[0] < 1.0 and done < total):
            return
        last[0] = now
        tell(f"fit: reading {source} {done / total:.0%}")

    calls, garbage = read_call_logs(paths, mapping, reading)
    skipped = [(src, g) for src, g in garbage.items() if g.total]
    for source, g in skipped:
        tell(f"{source}: {g.total:,} of {g.rows_read:,} rows skipped" + (
            " (--strict: rejected)" if strict else ""))  # fmt: skip
        for line in g.lines():
            tell(f"  {line}")
    if strict and skipped:
        raise StrictRejectedError(names, [("", "garbage rows and strict: nothing written")])
    if calls.empty:
        raise ScenarioError(names, [("", "no usable calls in the logs")])
    return fit_frame(
        calls, names, [str(t) for t in paths], out_file, groups=groups, mode=mode,
        min_calls=min_calls, extras=extras, seed=seed, tell=tell, progress=progress,
    )  # fmt: skip


def fit_frame(
    calls: pd.DataFrame,
    names: str,
    sources: list[str],
    out_file: Path | None,
    *,
    groups: tuple[str, ...] = ("provider", "model"),
    mode: str = "auto",
    min_calls: int = 20,
    extras: bool = True,
    seed: int = 0,
    tell: Callable[[str], None] = lambda _line: None,
    progress: bool = False,
) -> Fitted:
    """`fit` over a normalized call log already read (`names`: its files, for messages;
    `sources`: for the fitted file's header); with `out_file`, the fitted files written."""
    from sim.calibration.extras import fit_extras  # noqa: PLC0415 - the fit's code on demand
    from sim.calibration.report import (  # noqa: PLC0415
        bucket_table,
        extras_summary,
        fit_calls,
        fitted_yaml,
        mode_lines,
        refit_outside_spells,
        report_table,
    )

    tick = (lambda what: tell(f"fit: fitting {what}")) if progress else None
    fits, too_small = fit_calls(calls, groups, mode, min_calls, seed, tick)
    for line in too_small:
        tell(f"skipped {line}")
    if not fits:
        raise ScenarioError(names, [("", f"no group has {min_calls} ok calls to fit")])
    found: list[Any] = []
    if extras and not bool(calls["start_s"].notna().any()):
        if progress:
            tell("fit: no start times in the logs: extras skipped")
        extras = False
    if extras:
        if tick is not None:
            tick("extras (spells, difficulty, load, overhead, arrivals)")
        base = {(g.fit.provider, g.fit.model): g.fit.serving_block() for g in fits}
        known = calls[calls["provider"].notna() & calls["model"].notna() & calls["start_s"].notna()]
        known = known.reset_index(drop=True)
        found = fit_extras(known, base)
        fits = refit_outside_spells(known, fits, found, groups, mode, seed)
    table = report_table(fits, extras_summary(fits, found) if extras else None)
    buckets = bucket_table(fits)
    stem_name = out_file.stem if out_file is not None else "fitted"
    text = fitted_yaml(fits, sources, found, stem_name)
    written = [] if out_file is None else _write_fit(out_file, fits, table, buckets, text)
    return Fitted(table, buckets, mode_lines(fits), text, written)


def _groups(by: Sequence[str] | str) -> tuple[str, ...]:
    """The grouping columns (a comma-separated string or names), each a known one."""
    values = [by] if isinstance(by, str) else list(by)
    groups = tuple(c.strip() for v in values for c in v.split(",") if c.strip())
    for name in groups:
        if name not in GROUPS:
            raise ScenarioError("--by", [(name, f"unknown column (allowed: {', '.join(GROUPS)})")])
    return groups


def _write_fit(
    out_file: Path, fits: Any, table: pd.DataFrame, buckets: pd.DataFrame, text: str
) -> list[Path]:
    """The fitted YAML, its report tables, samples and figure, each written whole."""
    from sim.calibration.plots import fit_figure  # noqa: PLC0415 - matplotlib on demand
    from sim.calibration.report import sample_files  # noqa: PLC0415

    figure = fit_figure(fits, buckets)
    stem = out_file.with_suffix("")
    written = {
        out_file: text,
        stem.with_suffix(".report.csv"): table.to_csv(index=False, float_format="%.6g"),
        stem.with_suffix(".buckets.csv"): buckets.to_csv(index=False, float_format="%.6g"),
        **{out_file.with_name(n): t for n, t in sample_files(fits, out_file.stem).items()},
    }
    for path, content in written.items():
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(content, encoding="utf-8")
        temp.replace(path)
    png = stem.with_suffix(".png")
    figure.savefig(png.with_name(png.name + ".tmp.png"), dpi=110)
    png.with_name(png.name + ".tmp.png").replace(png)
    return [*written, png]


def synth(
    scenario: ScenarioLike,
    out: str | Path | None = None,
    *,
    traces: str | Path | None = None,
    requests: int | None = None,
    seed: int | None = None,
    policy: str | None = None,
    guard: Callable[[], AbstractContextManager[object]] | None = None,
) -> pd.DataFrame:
    """Write a synthetic call log of the scenario's calls (one policy, the first by default)
    to `out` as CSV (the normalized call log's columns) and/or, with `traces`, its runs as OTLP
    JSON traces (a root span per run, a span per call); returns the log. `guard()` is entered
    around the simulation alone (the command line's Ctrl-C between events)."""
    from sim.calibration.call_log import check_log_target, write_call_log  # noqa: PLC0415
    from sim.calibration.synth import calls_to_log  # noqa: PLC0415
    from sim.calibration.traces_out import runs_to_traces, write_traces  # noqa: PLC0415
    from sim.study.runner import chosen_policies, run  # noqa: PLC0415

    plan = plan_of(scenario)
    if out is None and traces is None:
        raise ScenarioError(label("out"), [("", "give out (a call log CSV) or traces (OTLP JSON)")])
    path = None if out is None else file_path(out, "out")
    trace_path = None if traces is None else file_path(traces, "traces")
    if path is not None:
        check_log_target(path)
    if trace_path is not None and (
        trace_path.is_dir() or not trace_path.absolute().parent.is_dir()
    ):
        raise ScenarioError(
            str(trace_path), [("", "is a folder or its folder does not exist; --traces takes "
                                   "a JSON file name")],
        )  # fmt: skip
    name = chosen_policies(plan, [policy] if policy else None, "--policy")[0]
    with guard() if guard is not None else nullcontext():
        result = run(plan, requests=requests, seed=seed, policies=[name], records=ALL)
    log = calls_to_log(result.calls)
    if path is not None:
        write_call_log(log, path)
    if trace_path is not None:
        write_traces(runs_to_traces(result.requests, result.calls, plan.name), trace_path)
    return log
