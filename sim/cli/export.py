"""`tailsim export`: a scenario's policy as the client code a team runs."""

from __future__ import annotations

from pathlib import Path

import click

from sim import api
from sim.cli.common import bad_input_exits, err, out


@click.group("export")
def export_group() -> None:
    """Write a scenario's policy as client code (openai)."""


@export_group.command("openai")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--policy", "-p", "policy", required=True, help="The policy to export.")
@click.option("--out", "target", type=click.Path(path_type=Path), default=None,
              help="Write the handler to this .py file (default: print it).")  # fmt: skip
def openai(scenario: Path, policy: str, target: Path | None) -> None:
    """POLICY of SCENARIO as openai client settings and an asyncio handler that `tailsim
    drive SCENARIO FILE.py:handle` runs (kinds wait, cut, race, hedge)."""
    with bad_input_exits():
        exported = api.export_openai(scenario, policy, target)
    for line in exported.unexpressed:
        err.print(f"not carried out: {line}", markup=False, soft_wrap=True)
    if target is None:
        out.print(exported.code, markup=False, soft_wrap=True, highlight=False)
    else:
        out.print(f"{target}: written (run it: tailsim drive {scenario} {target}:handle)",
                  markup=False)  # fmt: skip
