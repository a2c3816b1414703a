"""The exact miss probability of a chain of independent lognormal-plus-stall steps (FFT).

A step's latency is first token + generation + stall: T + K/S + B X with T, S lognormal
(K tokens at speed S: a lognormal too), B ~ Bernoulli(p) and X the stall's length. The sum of
n independent steps is computed by numerical convolution: each law's mass per grid cell (from
its exact cdf), multiplied in Fourier space, n-th power, summed past the deadline. It is the
reference the rare-event estimate (`sim.rare.nines`) is held to.
"""

from __future__ import annotations

import numpy as np

from sim.model.latency import Distribution, LogNormal


def _cell_mass(dist: Distribution, grid: np.ndarray, dx: float) -> np.ndarray:
    """P(X in [x - dx/2, x + dx/2)) for every grid point x (mass rounded to the nearest)."""
    edges = np.concatenate(([0.0], grid + dx / 2))
    cdf = np.asarray(dist.cdf(edges), dtype=float)
    return np.diff(cdf)


def chain_miss_probability(
    steps: int,
    ttft: LogNormal,
    speed: LogNormal,
    output_tokens: int,
    stall_probability: float,
    stall_extra: Distribution | None,
    deadline_s: float,
    dx: float = 0.005,
    span: float = 2.0,
) -> float:
    """P(sum of `steps` iid step latencies > `deadline_s`), on a grid of `dx` seconds up to
    `span` x the deadline (mass beyond the grid is added back exactly per step: it is a miss)."""
    n = int(np.ceil(span * deadline_s / dx)) + 1
    grid = np.arange(n) * dx
    generation = LogNormal(float(np.log(output_tokens)) - speed.mu, speed.sigma)
    t = _cell_mass(ttft, grid, dx)
    g = _cell_mass(generation, grid, dx)
    size = 1 << int(np.ceil(np.log2(2 * n * steps)))
    step = np.fft.rfft(t, size) * np.fft.rfft(g, size)
    if stall_extra is not None and stall_probability > 0:
        x = _cell_mass(stall_extra, grid, dx)
        step = step * ((1 - stall_probability) + stall_probability * np.fft.rfft(x, size))
    total = np.fft.irfft(step**steps, size)
    # P(sum <= deadline): cells whose centre is at most the deadline (rounding to the nearest)
    inside = float(np.clip(total[: int(np.floor(deadline_s / dx + 0.5)) + 1], 0, None).sum())
    return 1.0 - inside
