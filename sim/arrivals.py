"""When customer requests arrive: Poisson, on/off bursts, or the replay of a real trace."""

from __future__ import annotations

import numpy as np

from sim.config import ArrivalsSpec


def arrival_times(spec: ArrivalsSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """The first `n` arrival times in seconds (sorted, starting near 0)."""
    if spec.kind == "poisson":
        return np.cumsum(rng.exponential(1.0 / spec.rate_per_s, size=n))
    if spec.kind == "bursty":
        return _on_off(spec, n, rng)
    return _trace(spec, n)


def _on_off(spec: ArrivalsSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """An on/off Markov-modulated Poisson process with mean rate `rate_per_s`.

    Bursts last Exp(`burst_s`) with rate `peak_to_mean * rate_per_s`; silences between them last
    Exp(`burst_s * (peak_to_mean - 1)`), so the long-run mean rate is `rate_per_s`.
    """
    peak = spec.rate_per_s * spec.peak_to_mean
    mean_gap = spec.burst_s * (spec.peak_to_mean - 1.0)
    times: list[np.ndarray] = []
    total, clock = 0, 0.0
    while total < n:
        clock += rng.exponential(mean_gap)
        length = rng.exponential(spec.burst_s)
        count = rng.poisson(peak * length)
        if count:
            times.append(np.sort(clock + rng.uniform(0.0, length, size=count)))
            total += count
        clock += length
    return np.concatenate(times)[:n]


def _trace(spec: ArrivalsSpec, n: int) -> np.ndarray:
    """The trace's offsets scaled by `time_scale`, repeated end to end if more are asked for."""
    offsets = spec.trace_offsets
    if offsets is None:
        raise ValueError(
            "trace arrivals without timestamps: load the scenario with sim.load_scenario"
        )
    span = float(offsets[-1]) + (float(np.mean(np.diff(offsets))) if len(offsets) > 1 else 1.0)
    reps = -(-n // len(offsets))
    tiled = np.concatenate([offsets + k * span for k in range(reps)])[:n]
    return tiled * spec.time_scale
