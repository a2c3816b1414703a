"""A step's workflow keys as the engine reads them: when, repeat, loop, map.

`Flow` is compiled once per run from a step's spec; `count` turns a request's uniform (from a
named per-request stream) into its count by the law's inverse CDF, so every policy, chunk and
window of requests sees the same count for the same request.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from scipy.stats import poisson

from sim.model.config import CountSpec, GroupSpec, JoinFirst, StepSpec

#: Stream names (`CallDrawBank.uniform(index, NAME, step)`): one uniform per request each.
WHEN, LOOP, MAP = "when", "loop", "map"


def count(law: CountSpec, u: float, cap: int | None = None) -> int:
    """The count (>= 1) at uniform `u` in [0, 1) of `law` (its inverse CDF), capped at `cap`."""
    if law.dist == "constant":
        assert law.value is not None
        n = law.value
    elif law.dist == "geometric":
        assert law.mean is not None
        p = 1.0 / law.mean
        n = 1 if p >= 1.0 else 1 + math.floor(math.log1p(-u) / math.log1p(-p))
    elif law.dist == "poisson":
        assert law.mean is not None
        n = 1 + (int(poisson.ppf(u, law.mean)) if law.mean > 0 else 0)
    else:
        assert law.values is not None
        assert law.weights is not None
        total = sum(law.weights)
        cumulative, running = [], 0.0
        for w in law.weights:
            running += w / total
            cumulative.append(running)
        n = law.values[min(bisect.bisect_right(cumulative, u), len(law.values) - 1)]
    return n if cap is None else min(n, cap)


def draw_id(step: str, iteration: int) -> str:
    """The key a step's call draws under: the step's id for iteration 0 (today's draws), a key
    with `iteration` in it for the others (draws of their own)."""
    return step if iteration == 0 else f"{step}#{iteration}"


@dataclass(frozen=True, slots=True)
class Flow:
    """One step's workflow keys, compiled: each None (or 1) when off."""

    when_probability: float | None = None
    when_step: int | None = None  # index of the ancestor whose answer decides
    when_valid: bool = True  # run if that answer's validity is this
    repeat: int = 1  # asks in all
    loop: CountSpec | None = None
    loop_max: int | None = None
    map: CountSpec | None = None
    map_first: int | None = None  # None: join all
    #: A group's first step: the group's step indices in order (its loop is `loop`), and the
    #: name its count's stream is keyed by (else the step's id).
    members: tuple[int, ...] = ()
    loop_key: str = ""

    @classmethod
    def of_group(cls, name: str, group: GroupSpec, index: dict[str, int]) -> Flow:
        """The flow of a group's first step: the whole group, looped."""
        return cls(
            loop=group.loop.count,
            loop_max=group.loop.max,
            members=tuple(index[s] for s in group.steps),
            loop_key=name,
        )

    @classmethod
    def from_spec(cls, spec: StepSpec, index: dict[str, int]) -> Flow | None:
        """The step's keys, or None without any (the step runs as it always has)."""
        if spec.when is None and spec.repeat is None and spec.loop is None and spec.map is None:
            return None
        when = spec.when
        join = spec.map.join if spec.map is not None else "all"
        return cls(
            when_probability=when.probability if when is not None else None,
            when_step=index[when.step] if when is not None and when.step is not None else None,
            when_valid=when is None or when.answer != "invalid",
            repeat=spec.repeat.max if spec.repeat is not None else 1,
            loop=spec.loop.count if spec.loop is not None else None,
            loop_max=spec.loop.max if spec.loop is not None else None,
            map=spec.map.count if spec.map is not None else None,
            map_first=join.first if isinstance(join, JoinFirst) else None,
        )
