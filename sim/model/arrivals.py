"""When customer requests arrive: Poisson, on/off bursts, the replay of a real trace, or a
schedule of Poisson segments (a burst at a known time)."""

from __future__ import annotations

import numpy as np

from sim.model.config import ArrivalsSpec


def arrival_times(spec: ArrivalsSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """The first `n` arrival times in seconds (sorted, starting near 0)."""
    if spec.kind == "poisson":
        return np.cumsum(rng.exponential(1.0 / spec.rate_per_s, size=n))
    if spec.kind == "bursty":
        return _on_off(spec, n, rng)
    if spec.kind == "schedule":
        return _schedule(spec, n, rng)
    return _trace(spec, n)


def rate_pieces(spec: ArrivalsSpec) -> list[tuple[float, float, float]]:
    """A schedule's (start_s, end_s, rate_per_s) pieces; the last runs forever at `rate_per_s`."""
    pieces, clock = [], 0.0
    for segment in spec.segments or []:
        pieces.append((clock, clock + segment.duration_s, segment.rate_per_s))
        clock += segment.duration_s
    pieces.append((clock, np.inf, spec.rate_per_s))
    return pieces


def bursts(spec: ArrivalsSpec) -> list[tuple[float, float]]:
    """The (start_s, end_s) stretches of a schedule whose rate is above its base `rate_per_s`
    (none for the other kinds): what the storm figure shades."""
    if spec.kind != "schedule":
        return []
    return [(a, b) for a, b, rate in rate_pieces(spec) if rate > spec.rate_per_s]


def _schedule(spec: ArrivalsSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """A piecewise-constant-rate Poisson process by time change: unit-rate arrival epochs
    (cumulative Exp(1) draws) mapped through the inverse of the cumulative rate. The same draws
    serve every schedule, so schedules differing only in a burst share their arrivals outside
    it (common random numbers for `tailsim stress`)."""
    epochs = np.cumsum(rng.exponential(1.0, size=n))
    pieces = rate_pieces(spec)
    starts = np.array([a for a, _, _ in pieces])
    rates = np.array([r for _, _, r in pieces])
    lengths = np.array([b - a for a, b, _ in pieces[:-1]])
    mass = np.concatenate([[0.0], np.cumsum(lengths * rates[:-1])])  # Λ at each piece's start
    piece = np.searchsorted(mass, epochs, side="right") - 1
    return starts[piece] + (epochs - mass[piece]) / rates[piece]


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
