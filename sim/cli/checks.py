"""The commands that check rather than simulate a study: `check` (a scenario is valid),
`schema` (the format's JSON Schema) and `validate` (the simulator against closed-form theory)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from sim.cli.common import bad_input_exits, out
from sim.model.scenario import json_schema_text, load_scenario
from sim.model.words import plural


@click.command()
def schema() -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    click.echo(json_schema_text())


@click.command()
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
