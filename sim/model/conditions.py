"""What makes a call slower than its latency law: provider load, bad spells, hard requests.

- `slowdown_factor`: the documented load curve x(1 + a * utilisation**k);
- `Episodes`: one provider's bad-spell timeline, drawn lazily from a stream of its own, so every
  policy of a simulation point meets the same spells at the same times;
- `difficulty_factors`: one lognormal factor per request, shared by every attempt of it.
"""

from __future__ import annotations

import numpy as np

from sim.model.config import DifficultySpec, EpisodesSpec
from sim.model.latency import lognormal_params


def slowdown_factor(a: float, k: float, utilisation: float) -> float:
    """How much longer first token and generation take at `utilisation` (busy slots / slots)."""
    return 1.0 + a * utilisation**k


class Episodes:
    """Alternating quiet and bad periods of one provider (an on/off renewal process).

    Quiet gaps last Exp(`every_s - last_s`) and spells Exp(`last_s`), so spells start on
    average every `every_s` seconds and cover `last_s / every_s` of the time. Time only moves
    forward in a simulation, so the timeline is drawn as it is reached.
    """

    __slots__ = ("end", "quiet_s", "rng", "spell_s", "start")

    def __init__(self, spec: EpisodesSpec, rng: np.random.Generator) -> None:
        self.rng = rng
        self.quiet_s = spec.every_s - spec.last_s
        self.spell_s = spec.last_s
        self.start = float(rng.exponential(self.quiet_s))
        self.end = self.start + float(rng.exponential(self.spell_s))

    def active(self, now: float) -> bool:
        """True if a spell is on at `now` (`now` never decreases between calls)."""
        while now >= self.end:
            self.start = self.end + float(self.rng.exponential(self.quiet_s))
            self.end = self.start + float(self.rng.exponential(self.spell_s))
        return now >= self.start


def difficulty_factors(spec: DifficultySpec, rng: np.random.Generator, n: int) -> list[float]:
    """n requests' difficulty factors: lognormal with the spec's median and p99."""
    mu, sigma = lognormal_params(spec.median, spec.p99)
    return np.exp(mu + sigma * rng.standard_normal(n)).tolist()
