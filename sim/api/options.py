"""The options the API's functions and `tailsim`'s commands share, declared once.

Each `Option` names the API keyword, the command line's spellings and its help; `sim.cli` builds
its click options from this table, and an API error about an option is raised against
`label(name)` (`"workers="`), which the command line shows as the flag (`--workers`). So no
option is spelled out in three places, and no lower layer needs to know the flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.analysis.capacity import RECORDS
from sim.engine.choice import ENGINES
from sim.model.errors import ScenarioError
from sim.study.executors import EXECUTORS
from sim.study.executors import check_executor as check_pool


@dataclass(frozen=True)
class Option:
    """One option: its API keyword, its flags on the command line, what values it takes
    (`kind`: int1 = integer >= 1, int0 = integer >= 0, choice, flag, text, many) and its help."""

    name: str
    flags: tuple[str, ...]
    kind: str
    help: str
    choices: tuple[str, ...] = ()
    default: object = None


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("requests", ("--requests", "-n"), "int1", "Override `requests`."),
        Option("seed", ("--seed", "-s"), "int0", "Override `seed`."),
        Option(
            "policies",
            ("--policy", "-p"),
            "many",
            "Run only these policies: repeat it (-p wait -p race) or separate names with commas "
            "(-p wait,race).",
        ),
        Option(
            "engine",
            ("--engine",),
            "choice",
            "Override `engine`: auto (vectorized where it gives the same numbers), des, "
            "vectorized.",
            ENGINES,
        ),
        Option(
            "records",
            ("--records",),
            "choice",
            "Tables to keep: all; requests (no calls.parquet); none (summary.csv, breakdown.csv, "
            "scenario.resolved.yaml, run.json and the figure, in memory that does not grow with "
            "calls). Default: all, or none when all would need more than 2 GiB.",
            RECORDS,
        ),
        Option(
            "executor",
            ("--executor", "-e"),
            "choice",
            "Where {what} run: here, in local processes, or on dask.distributed.",
            EXECUTORS,
            "inline",
        ),
        Option(
            "workers",
            ("--workers", "-w"),
            "int1",
            "Processes (processes, dask LocalCluster); default: the cores available. Needs "
            "--executor processes or dask.",
        ),
        Option(
            "scheduler",
            ("--scheduler",),
            "text",
            "Address of an existing dask scheduler (tcp://host:8786); needs --executor dask.",
        ),
        Option("out", ("--out",), "path", "Results folder (default: {default})."),
        Option("force", ("--force",), "flag", "Replace what --out holds (refused otherwise)."),
        Option("quiet", ("--quiet", "-q"), "flag", "Print no progress (the tables still print)."),
        Option("no_plot", ("--no-plot",), "flag", "Skip {figure}."),
        Option(
            "traces",
            ("--traces",),
            "path",
            "Also write the runs as OTLP JSON traces here (a root span per run, a span per call).",
        ),
        Option(
            "workflow",
            ("--workflow",),
            "path",
            "Infer the workflow from these traces (OTLP JSON, or CSV of spans) and write a "
            "runnable scenario to --out.",
        ),
    )
}


def label(name: str) -> str:
    """How an API error names option `name` (`workers=`); the command line shows its flag."""
    return f"{name}="


def flags_by_label() -> dict[str, str]:
    """Each option's error label -> its long flag, for the command line's messages."""
    return {label(o.name): o.flags[0] for o in OPTIONS.values()}


def check_executor(executor: str, workers: int | None, scheduler: str | None) -> None:
    """Refuse options the executor would silently ignore: workers when everything runs here
    and, as `sim.study.executors` refuses, a scheduler without dask; an unknown executor."""
    if executor not in EXECUTORS:
        allowed = ", ".join(EXECUTORS)
        raise ScenarioError(
            label("executor"), [("", f"unknown executor {executor!r} (allowed: {allowed})")]
        )
    if workers is not None and executor == "inline":
        raise ScenarioError(
            label("workers"),
            [("", "has no effect with executor inline (everything runs here, one after "
                  "another): choose executor processes or dask, or leave workers out")],
        )  # fmt: skip
    check_pool(executor, workers, scheduler)


def check_force(force: bool, out: str | Path | None) -> None:
    """Refuse `force` without `out`: a run without `out` gets a new folder of
    its own, so there is nothing to replace and `force` would be silently ignored."""
    if force and out is None:
        raise ScenarioError(
            label("force"),
            [("", "replaces what the results folder (out) holds; without out every run gets a "
                  "new folder of its own, so there is nothing to replace: give out, or leave "
                  "force out")],
        )  # fmt: skip


def policy_list(policies: Sequence[str] | str | None) -> list[str] | None:
    """Policies as given: a name, names, or names separated by commas; None for all."""
    if policies is None:
        return None
    if isinstance(policies, str):
        policies = [policies]
    names = [n.strip() for value in policies for n in str(value).split(",") if n.strip()]
    return names or None
