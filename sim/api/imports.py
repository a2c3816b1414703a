"""`import_litellm`: a LiteLLM proxy/router config as a scenario (the conversion is
`sim.adapters.litellm`): the scenario YAML with a header saying what to edit and every key not
imported, checked to load, and written whole."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from sim.adapters.litellm import Imported, Placeholders
from sim.adapters.litellm import import_litellm as convert
from sim.api.inputs import file_path, optional_path
from sim.model.errors import ScenarioError
from sim.model.scenario import parse_yaml, scenario_from_dict
from sim.model.version import __version__


@dataclass(frozen=True)
class LitellmImport:
    """An imported config: the conversion (`imported`: skipped keys, unpriced models), the
    scenario document as text, and where it was written (None: not written)."""

    imported: Imported
    document: str
    written: Path | None


def import_litellm(
    config: str | Path,
    out: str | Path | None = None,
    *,
    ttft_median: float = 0.5,
    ttft_p99: float = 2.0,
    tokens_per_s: float = 60.0,
) -> LitellmImport:
    """A LiteLLM CONFIG (model_list, router_settings) as a scenario: a provider per deployment,
    a model per group, a policy `litellm` of kind router; latencies are the placeholders given.
    Written to `out` whole (a temporary file renamed into place) when given."""
    path = file_path(config, "config")
    target = optional_path(out, "out")
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(source, [("", f"cannot read: {exc.strerror}")]) from None
    if not ttft_p99 > ttft_median:
        raise ScenarioError(source, [("", "--ttft-p99 must be greater than --ttft-median")])
    holders = Placeholders(ttft_median, ttft_p99, tokens_per_s)
    imported = convert(parse_yaml(text, source), source, holders)
    scenario_from_dict(imported.scenario, source=str(target or "<import>"))  # it loads
    document = render(imported, source)
    if target is not None:
        write_whole(target, document)
    return LitellmImport(imported, document, target)


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


def write_whole(path: Path, document: str) -> None:
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
