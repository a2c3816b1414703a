"""What every `tailsim` command shares: the consoles (tables in plain columns when the output
is not a terminal), bad input and Ctrl-C turned into exit codes, click options built from the
API's one table of options (`sim.api.options`), the comparison table.
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

from sim.api import OPTIONS, ScenarioError
from sim.api.faces import percent, percent_interval, shown_user_ttft, shows_valid_hits
from sim.api.options import flags_by_label

EXIT_BAD_INPUT = 2
#: Exit code after Ctrl-C, as shells report a command killed by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


class PlainWhenPiped(Console):
    """A console that draws tables in plain columns, without box characters, when its output is
    a file or a pipe, as the progress lines already are there."""

    def print(self, *objects: Any, **options: Any) -> None:
        """Print as rich does, each table without its box when not on a terminal."""
        if not self.is_terminal and any(isinstance(thing, Table) for thing in objects):
            for thing in objects:
                if isinstance(thing, Table):
                    if thing.title:  # on a line of its own, whole (not wrapped to the columns)
                        super().print(thing.title, markup=False, soft_wrap=True)
                        thing.title = None
                    thing.box = None
                    thing.pad_edge = False
                super().print(thing, **options)
            return
        super().print(*objects, **options)


out = PlainWhenPiped(highlight=False, width=None if sys.stdout.isatty() else 160)
err = PlainWhenPiped(stderr=True, highlight=False)


def in_flags(exc: ScenarioError) -> ScenarioError:
    """`exc` with an option named as the command line spells it (`workers=` -> `--workers`)."""
    flags = flags_by_label()
    if exc.source not in flags:
        return exc
    return ScenarioError(flags[exc.source], exc.problems)


@contextmanager
def bad_input_exits() -> Iterator[None]:
    """Turn a ScenarioError into a clear message on stderr and exit code 2, and Ctrl-C into
    exit code 130 (whatever was being written has been removed by then)."""
    try:
        yield
    except ScenarioError as exc:
        err.print("[bold red]error:[/] " + escape(in_flags(exc).render()), soft_wrap=True)
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


def option(name: str, **words: str) -> Callable[[Any], Any]:
    """The click option of API option `name` (`sim.api.options.OPTIONS`): its flags, values and
    help (`words` fill the help's {placeholders})."""
    spec = OPTIONS[name]
    kinds: dict[str, dict[str, Any]] = {
        "int1": {"type": click.IntRange(min=1)},
        "int0": {"type": click.IntRange(min=0)},
        "choice": {"type": click.Choice(spec.choices)},
        "flag": {"is_flag": True},
        "text": {},
        "many": {"multiple": True},
        "path": {"type": click.Path(path_type=Path)},
    }
    extra = dict(kinds[spec.kind])
    if spec.default is not None:
        extra.update(default=spec.default, show_default=True)
    return click.option(*spec.flags, name, help=spec.help.format(**words), **extra)


def options(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Apply click decorators in the order written (the first is the first in --help)."""

    def apply(command: Any) -> Any:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def simulation_options(default_out: str, figure: str) -> Callable[[Any], Any]:
    """The arguments `run` and `sweep` share: scenario, --out, --requests, --policy, ..."""
    return options(
        click.argument("scenario", required=False, type=click.Path(path_type=Path)),
        option("out", default=default_out),
        option("requests"),
        option("policies"),
        option("quiet"),
        option("no_plot", figure=figure),
        option("seed"),
    )


def executor_options(what: str) -> Callable[[Any], Any]:
    """--executor, --workers and --scheduler: where `what` run."""
    return options(option("executor", what=what), option("workers"), option("scheduler"))


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
    # the named step's first token, where one is named: p50/p90 in one cell, then the hit rate
    user = {column for column, _header, _share in shown_user_ttft(summary)}
    if user:
        headers.append(("user TTFT p50/p90 s", "right"))
    if "user_ttft_hit_rate" in user:
        headers.append(("TTFT hits", "right"))
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
            *(
                [f"{num(row['user_ttft_p50_s'], 1)}/{num(row['user_ttft_p90_s'], 1)}"]
                if user
                else []
            ),
            *([percent(row["user_ttft_hit_rate"])] if "user_ttft_hit_rate" in user else []),
        )
    return table


def num(value: Any, digits: int) -> str:
    """A number with `digits` decimals, or n/a."""
    return "n/a" if pd.isna(value) else f"{value:.{digits}f}"
