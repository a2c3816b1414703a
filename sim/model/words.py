"""Numbers in messages: counts pluralised ("1 step", "3 policies") and shares as percentages
that never round a rare miss away."""

from __future__ import annotations

import math


def plural(count: int | float, noun: str, many: str = "") -> str:
    """`count` and `noun`, the noun in its plural (`many`, default noun + "s") unless count is 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def percent(share: float, decimals: int = 1) -> str:
    """`share` (in [0, 1]) as a percentage with `decimals` decimals, more where rounding would
    turn a share short of 1 into "100.0%" or a positive one into "0.0%": a rare miss or a rare
    hit never disappears in the rounding (99.993% prints "99.99%", not "100.0%")."""
    if math.isnan(share):
        return "n/a"
    for places in range(decimals, 7):
        text = f"{share:.{places}%}"
        if (share < 1 and text == f"{1:.{places}%}") or (share > 0 and text == f"{0:.{places}%}"):
            continue
        return text
    return text


def percent_interval(share: float, low: float, high: float) -> str:
    """A share and its interval: "82.7% [81.6%, 83.9%]" (each by `percent`)."""
    return f"{percent(share)} [{percent(low)}, {percent(high)}]"
