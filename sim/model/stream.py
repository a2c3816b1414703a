"""The stream of a call: when its tokens arrive, a stall's place in it, where it breaks.

A call's answer starts at its first token (`ttft` after it gets a slot) and then streams its
output tokens at the call's speed over `generation` seconds; a mid-stream stall of `stall`
seconds starts when a share `onset` of the tokens has streamed (onset uniform, drawn from a
stream of its own so that no earlier draw moves). These functions say how much of the answer
a caller holds at a given time, in one place for both engines: the scalar and the array forms
do the same float operations in the same order, so the engines agree to the last bit.
"""

from __future__ import annotations

import math

import numpy as np

#: Names of the per-call streams (`CallDrawBank.uniform` keys' first part).
ONSET, PLACE, BREAK, BREAK_AT = "onset", "stall-place", "break", "break-at"


def streamed_share(x: float, generation: float, stall: float, onset: float) -> float:
    """The share of the output tokens received `x` > 0 seconds after the first token.

    Without a mid-stream stall (`stall` 0 or `onset` NaN) an even share of
    `generation + stall` (the law before streams had a place: kept bit for bit); with one, the
    tokens before its onset, none during it, and the rest after it."""
    if stall > 0 and not math.isnan(onset):
        at = onset * generation
        if x <= at:
            share = x / generation
        elif x <= at + stall:
            return onset
        elif generation > 0:
            share = (x - stall) / generation
        else:
            return 1.0
        return min(1.0, share)
    generating = generation + stall
    return min(1.0, x / generating) if generating > 0 else 1.0


def streamed_shares(
    x: np.ndarray, generation: np.ndarray, stall: np.ndarray, onset: np.ndarray
) -> np.ndarray:
    """`streamed_share` over arrays (element by element, the same operations)."""
    generating = generation + stall
    positive = generating > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(positive, np.minimum(1.0, x / np.where(positive, generating, 1.0)), 1.0)
        placed = np.flatnonzero((stall > 0) & ~np.isnan(onset))
        if len(placed):
            g, d, f, t = generation[placed], stall[placed], onset[placed], x[placed]
            at = f * g
            before = np.minimum(1.0, t / g)
            after = np.where(g > 0, np.minimum(1.0, (t - d) / np.where(g > 0, g, 1.0)), 1.0)
            share[placed] = np.where(t <= at, before, np.where(t <= at + d, f, after))
    return share


def time_to_share(share: float, generation: float, stall: float, onset: float) -> float:
    """Seconds after the first token at which a share `share` of the tokens has streamed (a
    mid-stream break's instant): the stall counted if its onset comes first."""
    t = share * generation
    if stall > 0 and not math.isnan(onset) and onset < share:
        t += stall
    return t


def times_to_shares(
    share: np.ndarray, generation: np.ndarray, stall: np.ndarray, onset: np.ndarray
) -> np.ndarray:
    """`time_to_share` over arrays (element by element, the same operations)."""
    t = share * generation
    with np.errstate(invalid="ignore"):
        counted = (stall > 0) & ~np.isnan(onset) & (onset < share)
    return np.where(counted, t + stall, t)
