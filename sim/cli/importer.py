"""`tailsim import litellm CONFIG.yaml [--out SCENARIO.yaml]`: a LiteLLM config as a scenario.

The conversion is `sim.adapters.litellm`; this writes the scenario (with a header comment
saying what to edit and every key not imported), lists the keys not imported on stderr, and
checks that the result loads, so what it writes `tailsim check` accepts.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click
import yaml

from sim.adapters.litellm import Imported, Placeholders, import_litellm
from sim.cli.common import bad_input_exits, err, out
from sim.model.errors import ScenarioError
from sim.model.scenario import parse_yaml, scenario_from_dict
from sim.model.version import __version__


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
        source = str(config)
        try:
            text = config.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(source, [("", f"cannot read: {exc.strerror}")]) from None
        if not ttft_p99 > ttft_median:
            raise ScenarioError(source, [("", "--ttft-p99 must be greater than --ttft-median")])
        holders = Placeholders(ttft_median, ttft_p99, tokens_per_s)
        imported = import_litellm(parse_yaml(text, source), source, holders)
        scenario_from_dict(imported.scenario, source=str(out_path or "<import>"))  # loads
        document = render(imported, source)
    for line in imported.skipped:
        err.print(f"not imported: {line}", markup=False, soft_wrap=True)
    for name in imported.unpriced:
        err.print(f"no price known: model {name} is a $0 PLACEHOLDER", markup=False)
    if out_path is None:
        click.echo(document, nl=False)
        return
    _write(out_path, document)
    out.print(
        f"{out_path}: written ({len(imported.scenario['providers'])} deployments)", markup=False
    )


def render(imported: Imported, source: str) -> str:
    """The scenario YAML with its header comment."""
    lines = [
        f"# Imported from {source} by `tailsim import litellm` (tailsim {__version__}).",
        "# EDIT BEFORE TRUSTING THE NUMBERS:",
        "# - every provider's latency (ttft_s, tokens_per_s) is a PLACEHOLDER: put your",
        "#   measured laws there (docs/scenario-format.md, Distributions);",
        "# - the workflow is a one-step PLACEHOLDER: replace it with your own steps (each step's",
        "#   model is the LiteLLM model group it calls), and set deadline_s and arrivals;",
        "# - a deployment's rpm/tpm became its provider's quota (the real limit may differ);",
        *imported.price_header(),
        "# The router is the only retry loop (each provider's sdk makes no retry of its own).",
    ]
    for raw, name in imported.renamed.items():
        lines.append(f"# Renamed: {raw!r} -> {name!r}")
    if imported.skipped:
        lines.append("# Keys not imported (not modelled or no effect in the simulation):")
        lines += [f"# - {line}" for line in imported.skipped]
    body = yaml.safe_dump(imported.scenario, sort_keys=False, default_flow_style=None, width=100)
    return "\n".join(lines) + "\n" + body


def _write(path: Path, document: str) -> None:
    """Write `document` to `path` whole or not at all (a temporary file renamed into place)."""
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(document)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
