"""Which providers serve which models: all a policy's construction needs of the scenario.

A policy routes each attempt to a provider serving the attempt's model (`providers[k mod n]`,
the step's own, or the first that serves it). `Routes` is that table, in file order, so the
policy kinds build their plans from it without the scenario.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Routes:
    """Per provider (in file order), the models it serves; and the models (in file order)."""

    serves: tuple[tuple[str, frozenset[str]], ...]
    models: tuple[str, ...]

    @property
    def providers(self) -> list[str]:
        """Every provider, in file order."""
        return [name for name, _ in self.serves]

    def serving(self, model: str) -> list[str]:
        """Providers serving `model`, in file order."""
        return [name for name, models in self.serves if model in models]

    def serves_model(self, provider: str, model: str) -> bool:
        """True if `provider` serves `model`."""
        return any(name == provider and model in models for name, models in self.serves)
