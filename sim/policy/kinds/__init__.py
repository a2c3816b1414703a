"""The registry of policy kinds: name -> `Kind` (its module: spec -> plan, runs, capabilities).

Each kind lives in one module of this package (wait, cut and downshift share `sequential`: one
runtime class). Adding a kind is its spec in the format (`sim.model.config.policies`), one
module here exporting `KINDS`, and one line in `_MODULES`. Everyone else (the builder, the
compiler's features and capacity, the pilot, the worker order, the engines) reads a kind's
capabilities from `kind_of`, never its name.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from sim.policy.kinds.base import Kind

_MODULES = (
    "sim.policy.kinds.sequential",  # wait, cut, downshift
    "sim.policy.kinds.race",
    "sim.policy.kinds.hedge",
    "sim.policy.kinds.adaptive",
    "sim.policy.kinds.draft",
    "sim.policy.kinds.router",
    "sim.policy.kinds.per_step",
)
#: Every kind by its name (the `kind:` of its spec).
KINDS: dict[str, Kind] = {
    kind.name: kind for module in _MODULES for kind in import_module(module).KINDS
}


def kind_of(spec: Any) -> Kind:
    """The kind of a policy spec (by its `kind:`)."""
    try:
        return KINDS[spec.kind]
    except (AttributeError, KeyError):
        raise ValueError(f"{type(spec).__name__} is no registered policy kind") from None


__all__ = ["KINDS", "Kind", "kind_of"]
