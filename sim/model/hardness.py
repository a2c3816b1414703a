"""Hard requests: wrong answers and answer length belong to the request, not to the draw.

A share of requests (`hardness.share`) is hard, drawn once per request on a stream of its own
(`bank.uniform(i, "hardness")`), so turning hardness on moves no other draw and every attempt,
SDK retry, re-send and policy of a request meets the same verdict. A model's `when_hard` says what
a hard request does to its calls: junk with probability `invalid_rate` (in place of each of its
servings' own, read from the call's same outcome uniform) and an answer `length` times as long
(generation time and billed tokens scale with it; past the step's `max_tokens` it is truncated).
A stronger model is given a smaller effect, so re-drawing the same model cannot fix what a fall-up
to a stronger one can. Both engines apply it through this module, with the same operations.
The format's checks of the hardness keys (`hardness_problems`) live with `Scenario` in
`sim.model.config.scenario`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.model.latency import ERROR, INVALID, OK, CallLatency

if TYPE_CHECKING:
    from sim.model.config import HardnessSpec, WhenHardSpec
    from sim.model.streams import CallDrawBank

#: The per-request stream (`CallDrawBank.uniform` key) hardness is drawn from.
STREAM = "hardness"


@dataclass(frozen=True)
class Effect:
    """What a hard request does to one model's calls: junk threshold rule and length factor."""

    invalid_rate: float | None  # None: the serving's own junk probability
    length: float


def hard_tokens(tokens: float, factor: float) -> int:
    """A hard call's answer length: `tokens` (the step's length, fixed or drawn) times `factor`,
    rounded to whole tokens, at least 1 (with factor 1: exactly the easy call's length)."""
    return max(1, round(tokens * factor))


class Hardness:
    """Which requests are hard and, per affected model, what that does to its calls."""

    def __init__(
        self,
        share: float,
        effects: dict[str, Effect],
        latencies: dict[tuple[str, str], CallLatency],
    ) -> None:
        self.share = share
        #: Models a hard request changes (an effect that changes nothing is left out).
        self.effects = effects
        #: Per serving path of a model whose junk changes: (error threshold, junk threshold) of
        #: a hard call's outcome uniform, as `CallLatency.draw` compares an easy call's.
        self.thresholds = {
            path: (law.error_rate, law.error_rate + effects[path[1]].invalid_rate)  # type: ignore[operator]
            for path, law in latencies.items()
            if path[1] in effects and effects[path[1]].invalid_rate is not None
        }

    @classmethod
    def build(
        cls,
        spec: HardnessSpec | None,
        when_hard: Mapping[str, WhenHardSpec | None],
        latencies: dict[tuple[str, str], CallLatency],
    ) -> Hardness | None:
        """The hardness of `spec` over the models' `when_hard` entries, or None when no call
        can change (off, share 0, no model affected): then the engines run exactly as without
        it."""
        if spec is None or spec.share <= 0:
            return None
        effects = {}
        for name, when in when_hard.items():
            if when is not None and (when.invalid_rate is not None or when.length != 1.0):
                effects[name] = Effect(when.invalid_rate, when.length)
        return cls(spec.share, effects, latencies) if effects else None

    def is_hard(self, bank: CallDrawBank, index: int) -> bool:
        """Whether request `index` of `bank` is hard."""
        return bank.uniform(index, STREAM) < self.share

    def flags(self, bank: CallDrawBank) -> np.ndarray:
        """Every request of `bank`: hard or not (the values `is_hard` gives)."""
        return np.asarray(bank.uniform_column((STREAM,))) < self.share

    def outcome(self, path: tuple[str, str], v: float, drawn: int) -> int:
        """A hard call's drawn outcome from its outcome uniform `v` (`drawn`: the easy one)."""
        limits = self.thresholds.get(path)
        if limits is None:
            return drawn
        error, junk = limits
        return ERROR if v < error else INVALID if v < junk else OK

    def junk_rate(
        self, path: tuple[str, str], bank: CallDrawBank, index: int, easy: float
    ) -> float:
        """The junk probability of request `index`'s calls on `path` (`easy`: the serving's)."""
        if path not in self.thresholds or not self.is_hard(bank, index):
            return easy
        return self.effects[path[1]].invalid_rate  # type: ignore[return-value]

    def outcomes(
        self, path: tuple[str, str], hard: np.ndarray, v: np.ndarray, drawn: np.ndarray
    ) -> None:
        """`outcome` over arrays: rewrite `drawn` in place where `hard` (same comparisons)."""
        limits = self.thresholds.get(path)
        if limits is None:
            return
        error, junk = limits
        drawn[hard] = OK
        drawn[hard & (v < junk)] = INVALID
        drawn[hard & (v < error)] = ERROR

    def length(self, model: str) -> float:
        """The factor on a hard call's answer length on `model` (1: unchanged)."""
        effect = self.effects.get(model)
        return 1.0 if effect is None else effect.length

    def token_groups(
        self, model: str, hard: np.ndarray, output_tokens: int
    ) -> list[tuple[np.ndarray | None, int]]:
        """The calls of one slot of a fixed-length step split by answer length: [(rows mask,
        tokens)], [(None, output_tokens)] when every call has the step's length."""
        tokens = hard_tokens(output_tokens, self.length(model))
        if tokens == output_tokens or not hard.any():
            return [(None, output_tokens)]
        return [(~hard, output_tokens), (hard, tokens)]
