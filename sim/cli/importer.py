"""`tailsim import litellm CONFIG.yaml [--out SCENARIO.yaml]`: a LiteLLM config as a scenario.

The conversion and the writing are `sim.api.import_litellm`'s (the scenario with a header
comment saying what to edit and every key not imported, checked to load, so what it writes
`tailsim check` accepts); this lists the keys not imported on stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from sim import api
from sim.cli.common import bad_input_exits, err, out


@click.group("import")
def import_group() -> None:
    """Turn another tool's configuration into a scenario."""


@import_group.command("litellm")
@click.argument("config", type=click.Path(path_type=Path))
@click.option(
    "--out", "out_path", type=click.Path(path_type=Path), help="Write here (default: stdout)."
)
@click.option(
    "--ttft-median",
    type=click.FloatRange(min=0, min_open=True),
    default=0.5,
    show_default=True,
    help="Placeholder time to first token, median, s.",
)
@click.option(
    "--ttft-p99",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Placeholder time to first token, p99, s.",
)
@click.option(
    "--tokens-per-s",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Placeholder generation speed, median (p99: twice it).",
)
def litellm(
    config: Path, out_path: Path | None, ttft_median: float, ttft_p99: float, tokens_per_s: float
) -> None:
    """A LiteLLM proxy/router CONFIG (model_list, router_settings) as a scenario: a provider
    per deployment, a model per group, and a policy `litellm` of kind router."""
    with bad_input_exits():
        done = api.import_litellm(
            config, out_path, ttft_median=ttft_median, ttft_p99=ttft_p99, tokens_per_s=tokens_per_s
        )
    imported = done.imported
    for line in imported.skipped:
        err.print(f"not imported: {line}", markup=False, soft_wrap=True)
    for name in imported.unpriced:
        err.print(f"no price known: model {name} is a $0 PLACEHOLDER", markup=False)
    if out_path is None:
        click.echo(done.document, nl=False)
        return
    out.print(
        f"{out_path}: written ({len(imported.scenario['providers'])} deployments)", markup=False
    )
