"""The commands that check rather than simulate a study: `check` (a scenario is valid for run
and sweep), `schema` (the format's JSON Schema) and `validate` (the simulator against
closed-form theory)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from sim import api
from sim.api.faces import plural
from sim.cli.common import bad_input_exits, out


@click.command()
def schema() -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    click.echo(api.schema())


@click.command()
@click.argument("scenario", type=click.Path(path_type=Path))
def check(scenario: Path) -> None:
    """Validate SCENARIO without running it: everything `run` and `sweep` check before any work
    (the scenario, its compiled plan, every key and value its `sweep:` names)."""
    with bad_input_exits():
        plan = api.check(scenario)
    out.print(
        f"{scenario}: ok ({plural(len(plan.scenario.workflow.steps), 'step')}, "
        f"policies: {', '.join(plan.scenario.policies)})",
        markup=False,
    )


@click.command()
@click.option(
    "--size",
    type=click.IntRange(min=1000),
    default=None,
    help="Simulated requests of the base check (others scale from it); default: 20000.",
)
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed (default: fixed).")
def validate(size: int | None, seed: int | None) -> None:
    """Hold the simulator to closed-form theory; print each check, exit 1 if any fails."""
    done = api.validate(size, seed)
    table = Table(
        title=f"theory checks: size {done.size}, seed {done.seed}; interval = theory +- "
        f"{done.z_tolerance:g} standard errors (exact for invariants)",
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
    for r in done.results:
        table.add_row(
            r.name,
            f"{r.theory:.5g}",
            f"{r.simulated:.5g}",
            f"[{r.lo:.5g}, {r.hi:.5g}]",
            "[green]pass[/]" if r.passed else "[bold red]FAIL[/]",
        )
    out.print(table)
    for r in done.failed:
        out.print(r.describe(), style="bold red", markup=False, soft_wrap=True)
    out.print(
        f"{len(done.results) - len(done.failed)}/{len(done.results)} checks passed in "
        f"{done.wall_s:.1f} s (details: sim/study/validation.py)"
    )
    if done.failed:
        sys.exit(1)
