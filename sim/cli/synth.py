"""`tailsim synth`: a synthetic call log from a scenario's providers (the round trip of `fit`),
and with `--traces` the scenario's runs as OTLP JSON traces (the round trip of `fit --workflow`)."""

from __future__ import annotations

from pathlib import Path

import click

from sim import api
from sim.cli.common import bad_input_exits, interrupt_between_events, option, out


@click.command()
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    help="The CSV to write (the normalized call log's columns); --out or --traces is needed.",
)
@option("traces")
@option("requests")
@option("seed")
@click.option("--policy", help="The policy whose calls are logged (default: the first).")
def synth(
    scenario: Path,
    out_path: Path | None,
    traces: Path | None,
    requests: int | None,
    seed: int | None,
    policy: str | None,
) -> None:
    """Write a synthetic call log of SCENARIO's calls (one policy) to --out, as CSV, and/or its
    runs to --traces as OTLP JSON."""
    with bad_input_exits():
        log = api.synth(
            scenario, out_path, traces=traces, requests=requests, seed=seed, policy=policy,
            guard=interrupt_between_events,
        )  # fmt: skip
    if out_path is not None:
        out.print(f"{out_path}: {len(log)} calls", markup=False)
    if traces is not None:
        out.print(f"{traces}: traces of {len(log)} calls", markup=False)
