"""What every `tailsim` command shares: the consoles, bad input and Ctrl-C turned into exit
codes, the options `run` and `sweep` have in common, loading the scenario, the comparison table.
"""

from __future__ import annotations

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
from rich.table import Table

from sim.analysis.reading import shows_valid_hits
from sim.model.errors import ScenarioError
from sim.model.scenario import default_scenario_path, load_scenario
from sim.model.words import percent, percent_interval
from sim.plan import Plan, compile_scenario
from sim.study.executors import EXECUTORS

EXIT_BAD_INPUT = 2
#: Exit code after Ctrl-C, as shells report a command killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130

out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False)


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
def interrupt_between_events() -> Iterator[Callable[[], bool]]:
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


def policy_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--policy` values: repeated (`-p wait -p race`) or comma-separated (`-p wait,race`)."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


def simulation_options(default_out: str, figure: str) -> Callable[[Any], Any]:
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


def executor_options(what: str) -> Callable[[Any], Any]:
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


def load(scenario: Path | None) -> tuple[str, Plan]:
    """The compiled scenario at `scenario` (the bundled default if None) and how to name its
    source."""
    source = str(scenario) if scenario is not None else str(default_scenario_path())
    return source, compile_scenario(load_scenario(scenario))


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
    valid = shows_valid_hits(summary)  # the valid hit rate beside the hit rate, where they differ
    if valid:
        headers.insert(2, ("valid hits", "right"))
    for header, justify in headers:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in summary.to_dict("records"):
        table.add_row(
            str(row["policy"]),
            percent_interval(row["hit_rate"], row["hit_rate_lo"], row["hit_rate_hi"]),
            *([percent(row["valid_hit_rate"])] if valid else []),
            percent(row["customer_success_rate"]),
            num(row["p50_s"], 1),
            num(row["p95_s"], 1),
            num(row["p99_s"], 1),
            num(row["cost_per_request_usd"], 4),
            num(row["cost_per_success_usd"], 4),
            num(row["calls_per_request"], 2),
            num(row["rate_limited_per_request"], 2),
            f"{row['retry_amplification']:.2f}x",
            num(row["quality_mean"], 3),
        )
    return table


def num(value: Any, digits: int) -> str:
    return "n/a" if pd.isna(value) else f"{value:.{digits}f}"
