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
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from sim.model.latency import U_STALL, U_STALL_EXTRA
from sim.rare.tilt import RAISED, SHIFTED, SlotSample, SlotTilt, Tilt, log_ratio

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
    groups: dict[str, Hashable] | None = None,
    row_share: Callable[[tuple[str, int]], np.ndarray] | None = None,
) -> Tilt:
    """The next tilt of the cross-entropy method: per slot, the weighted mean of the elite's
    normal scores (the stall length's over stalled elite rows only) and the weighted share of
    elite rows below each cut, with weights p/q * 1{elite} (times `row_share(slot)`, a
    mixture's responsibility, if given); mixed with the old tilt by `smoothing` and bounded
    (|theta| <= THETA_MAX, cut <= mass <= MASS_MAX). Steps of one group in `groups` (alike
    steps) pool their draws per attempt: one tilt, fitted on all."""
    if float(elite_weight.sum()) <= 0:
        return tilt
    sums: dict[Hashable, np.ndarray] = {}  # per pooled slot: numerators and denominators
    for key, old in tilt.slots.items():
        u, z = samples[key].uniforms, samples[key].z
        weight = elite_weight if row_share is None else elite_weight * row_share(key)
        stalled = u[:, U_STALL] < old.cut[0]
        row = np.zeros(10)
        for k, column in enumerate(SHIFTED):
            w = weight * stalled if column == U_STALL_EXTRA else weight
            row[2 * k], row[2 * k + 1] = float((w * z[:, k]).sum()), float(w.sum())
        for k, column in enumerate(RAISED):
            below = u[:, column] < old.cut[k]
            row[6 + 2 * k] = float((weight * below).sum())
            row[7 + 2 * k] = float(weight.sum())
        pooled = (groups.get(key[0], key[0]) if groups else key[0], key[1])
        sums[pooled] = sums.get(pooled, 0) + row
    slots: dict[tuple[str, int], SlotTilt] = {}
    for key, old in tilt.slots.items():
        row = sums[(groups.get(key[0], key[0]) if groups else key[0], key[1])]
        theta = []
        for k in range(len(SHIFTED)):
            fitted = row[2 * k] / row[2 * k + 1] if row[2 * k + 1] > 0 else 0.0
            new = smoothing * fitted + (1 - smoothing) * old.theta[k]
            theta.append(float(np.clip(new, -THETA_MAX, THETA_MAX)))
        mass = []
        for k in range(len(RAISED)):
            c = old.cut[k]
            if c <= 0 or row[7 + 2 * k] <= 0:
                mass.append(old.mass[k])
                continue
            fitted = row[6 + 2 * k] / row[7 + 2 * k]
            new = smoothing * fitted + (1 - smoothing) * old.mass[k]
            mass.append(float(np.clip(new, c, MASS_MAX)))
        slots[key] = SlotTilt((theta[0], theta[1], theta[2]), old.cut, (mass[0], mass[1]))
    return Tilt(slots)


def jump_update(
    background: Tilt,
    jump: Tilt,
    samples: dict[tuple[str, int], SlotSample],
    elite_weight: np.ndarray,
    groups: dict[str, Hashable] | None = None,
    smoothing: float = 0.7,
) -> tuple[Tilt, Tilt]:
    """One cross-entropy (EM) step of the one-big-jump mixture (`jump_components`: no step or
    one step drawn from `jump`, equally likely): each elite draw's responsibility for "step j
    jumped" is q_j / sum q over the components; `jump` is refitted on each step's slots weighted
    by its responsibility, `background` on the rest. While the two are equal the draws cannot
    tell, so the first step starts from GUESS (the step that looks slowest takes the jump)."""
    start = jump if jump != background else _guess(background)
    steps = list(dict.fromkeys(step for step, _ in background.slots))
    diff = np.zeros((len(steps) + 1, len(elite_weight)))  # row 0: no jump
    for key in background.slots:
        gap = log_ratio(start.slots[key], samples[key]) - log_ratio(
            background.slots[key], samples[key]
        )
        diff[1 + steps.index(key[0])] += gap
    share = np.exp(diff - diff.max(axis=0))
    share /= share.sum(axis=0)
    of_step = {step: share[1 + j] for j, step in enumerate(steps)}

    def jumped(key: tuple[str, int]) -> np.ndarray:
        return of_step[key[0]]

    def not_jumped(key: tuple[str, int]) -> np.ndarray:
        return 1.0 - of_step[key[0]]

    new_jump = cross_entropy_update(start, samples, elite_weight, smoothing, groups, jumped)
    new_background = cross_entropy_update(
        background, samples, elite_weight, smoothing, groups, not_jumped
    )
    return new_background, new_jump


def _guess(plain: Tilt) -> Tilt:
    """A first guess of the jump: slower first token and generation, longer and likelier
    stalls and failures (only to break the symmetry of the first EM step)."""
    slots = {
        key: SlotTilt(
            (1.0, -1.0, 2.0),
            s.cut,
            tuple(min(MASS_MAX, 10 * c) if c > 0 else c for c in s.cut),  # type: ignore[arg-type]
        )
        for key, s in plain.slots.items()
    }
    return Tilt(slots)
