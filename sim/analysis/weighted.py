"""Weighted (importance-sampling) estimates of a rare probability, and the cross-entropy update.

`WeightedTally` accumulates, batch by batch, the sums an importance-sampling estimate of
P(event) needs: p = mean(w 1{event}), its standard error, the 95% interval, the relative error
(half-width / estimate), the effective sample size of the event's weights and the largest
weight's share. `cross_entropy_update` is the cross-entropy method's step: the tilt that
maximises the weighted likelihood of the elite draws (closed forms for a normal mean and a
Bernoulli probability).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.model.latency import U_STALL, U_STALL_EXTRA
from sim.model.tilt import RAISED, SHIFTED, SlotSample, SlotTilt, Tilt

#: z of a two-sided 95% interval.
Z95 = 1.959963984540054
#: Bounds of the fitted tilt: normal shifts (in sd) and the raised probabilities.
THETA_MAX = 6.0
MASS_MAX = 0.9


@dataclass
class WeightedTally:
    """Running sums of w * 1{event} over draws (one per request), for one policy and event."""

    n: int = 0
    hits: int = 0  # draws in the event (unweighted)
    total: float = 0.0  # sum of w 1{event}
    squares: float = 0.0  # sum of (w 1{event})^2
    largest: float = 0.0  # the largest single w 1{event}

    def add(self, weight: np.ndarray, event: np.ndarray) -> None:
        """One batch: every draw's weight and whether it is in the event."""
        x = np.where(event, weight, 0.0)
        self.n += len(x)
        self.hits += int(np.count_nonzero(event))
        self.total += float(x.sum())
        self.squares += float((x * x).sum())
        self.largest = max(self.largest, float(x.max(initial=0.0)))

    @property
    def estimate(self) -> float:
        """The unbiased estimate of P(event)."""
        return self.total / self.n if self.n else math.nan

    @property
    def standard_error(self) -> float:
        """Standard error of `estimate` (sample variance of w 1{event}, ddof=1)."""
        if self.n < 2:
            return math.nan
        mean = self.total / self.n
        variance = max(self.squares / self.n - mean * mean, 0.0) * self.n / (self.n - 1)
        return math.sqrt(variance / self.n)

    def interval(self, bound_weight: float = 1.0) -> tuple[float, float]:
        """The 95% interval (normal); with no draw in the event, [0, 3 * bound_weight / n]
        (the rule of three on the proposal's probability, times the largest possible weight)."""
        if not self.n:
            return (math.nan, math.nan)
        if self.hits == 0:
            return (0.0, min(1.0, 3.0 * bound_weight / self.n))
        half = Z95 * self.standard_error
        return (max(0.0, self.estimate - half), min(1.0, self.estimate + half))

    @property
    def relative_error(self) -> float:
        """Half-width of the 95% interval over the estimate (inf with no draw in the event)."""
        if not self.total:
            return math.inf
        return Z95 * self.standard_error / self.estimate

    @property
    def ess(self) -> float:
        """Effective sample size of the event's weights: (sum w)^2 / sum w^2."""
        return self.total**2 / self.squares if self.squares else 0.0

    @property
    def max_share(self) -> float:
        """The largest single weight's share of the estimate (1: one draw is everything)."""
        return self.largest / self.total if self.total else math.nan


def plain_runs_needed(p: float, rel_error: float = 0.1) -> float:
    """Plain Monte Carlo runs for a 95% half-width of `rel_error` * p: 1.96^2 (1-p) / (r^2 p)."""
    return Z95**2 * (1 - p) / (rel_error**2 * p)


def cross_entropy_update(
    tilt: Tilt,
    samples: dict[tuple[str, int], SlotSample],
    elite_weight: np.ndarray,
    smoothing: float = 0.7,
) -> Tilt:
    """The next tilt of the cross-entropy method: per slot, the weighted mean of the elite's
    normal scores (the stall length's over stalled elite rows only) and the weighted share of
    elite rows below each cut, with weights p/q * 1{elite}; mixed with the old tilt by
    `smoothing` and bounded (|theta| <= THETA_MAX, cut <= mass <= MASS_MAX)."""
    total = float(elite_weight.sum())
    if total <= 0:
        return tilt
    slots: dict[tuple[str, int], SlotTilt] = {}
    for key, old in tilt.slots.items():
        sample = samples[key]
        u, z = sample.uniforms, sample.z
        stalled = u[:, U_STALL] < old.cut[0]
        theta = []
        for k, column in enumerate(SHIFTED):
            w = elite_weight * stalled if column == U_STALL_EXTRA else elite_weight
            fitted = float((w * z[:, k]).sum() / w.sum()) if w.sum() > 0 else 0.0
            new = smoothing * fitted + (1 - smoothing) * old.theta[k]
            theta.append(float(np.clip(new, -THETA_MAX, THETA_MAX)))
        mass = []
        for k, column in enumerate(RAISED):
            c = old.cut[k]
            if c <= 0:
                mass.append(c)
                continue
            fitted = float((elite_weight * (u[:, column] < c)).sum() / total)
            new = smoothing * fitted + (1 - smoothing) * old.mass[k]
            mass.append(float(np.clip(new, c, MASS_MAX)))
        slots[key] = SlotTilt((theta[0], theta[1], theta[2]), old.cut, (mass[0], mass[1]))
    return Tilt(slots)
