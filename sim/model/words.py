"""Numbers in messages: counts pluralised ("1 step", "3 policies") and shares as percentages
that never round a rare miss away."""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal


def plural(count: int | float, noun: str, many: str = "") -> str:
    """`count` and `noun`, the noun in its plural (`many`, default noun + "s") unless count is 1."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


#: Most decimals a percentage grows to when its rounding would cross one of its bounds.
MAX_DECIMALS = 12


def percent_digits(
    share: float, decimals: int, below: tuple[float, ...] = (), above: tuple[float, ...] = ()
) -> str:
    """`share` x 100 in exact decimals, without the % sign: `decimals` decimals or as many more
    as it takes for the printed figure to stay below every bound in `below` the share is below,
    and above every bound in `above` it is above (so rounding never carries a value across a
    promise: 99.9949% is not printed 99.995% against a 99.995% target). The share is read as its
    shortest decimal, the one that reads back as the same float (792 / 800 is 0.99, not the
    binary 0.98999999999999999...), so a share equal to a bound prints level with it ("99.0",
    never "98.999999999999" against 0.99). "n/a" for NaN."""
    if math.isnan(share):
        return "n/a"
    exact = Decimal(repr(float(share))) * 100
    under = [Decimal(str(b)) * 100 for b in below]
    over = [Decimal(str(b)) * 100 for b in above]
    for places in range(decimals, MAX_DECIMALS + 1):
        shown = exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
        if all((shown < b) == (exact < b) for b in under) and all(
            (shown > b) == (exact > b) for b in over
        ):
            return f"{shown:f}"
    cut = exact.quantize(Decimal(1).scaleb(-MAX_DECIMALS), rounding=ROUND_FLOOR)
    return f"{cut:f}"  # still level with a bound only when equal to it within 1e-12 %


def percent(share: float, decimals: int = 1, bounds: tuple[float, ...] = ()) -> str:
    """`share` (in [0, 1]) as a percentage with `decimals` decimals, more where rounding would
    turn a share short of 1 into "100.0%" or a positive one into "0.0%": a rare miss or a rare
    hit never disappears in the rounding (99.993% prints "99.99%", not "100.0%"); nor is it
    carried across any of `bounds` (an SLO target: 98.995% against 99% is not "99.00%")."""
    digits = percent_digits(share, decimals, below=(1.0, *bounds), above=(0.0,))
    return digits if digits == "n/a" else digits + "%"


def percent_interval(share: float, low: float, high: float) -> str:
    """A share and its interval: "82.7% [81.6%, 83.9%]" (each by `percent`)."""
    return f"{percent(share)} [{percent(low)}, {percent(high)}]"
