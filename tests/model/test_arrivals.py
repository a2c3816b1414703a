"""sim.model.arrivals: Poisson gaps, bursty long-run rate, trace replay with time_scale."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim.model.arrivals import arrival_times
from sim.model.config import ArrivalsSpec
from sim.model.scenario import scenario_from_dict
from tests.helpers import scenario_dict


def test_poisson_mean_gap_is_one_over_rate() -> None:
    rate, n = 2.0, 20_000
    times = arrival_times(
        ArrivalsSpec(kind="poisson", rate_per_s=rate), n, np.random.default_rng(1)
    )
    assert len(times) == n
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert (gaps > 0).all()
    # exponential gaps: mean 1/rate, sd 1/rate, so SE of the mean = 1 / (rate sqrt(n)); allow 4 SE
    assert abs(gaps.mean() - 1 / rate) < 4 / (rate * math.sqrt(n))
    # and exponential, not merely right on average: coefficient of variation 1 (SE ~ 1/sqrt(n))
    assert abs(gaps.std() / gaps.mean() - 1.0) < 4 * math.sqrt(2.0 / n)


def test_poisson_prefix_does_not_depend_on_n() -> None:
    spec = ArrivalsSpec(kind="poisson", rate_per_s=0.5)
    short = arrival_times(spec, 10, np.random.default_rng(9))
    long = arrival_times(spec, 1000, np.random.default_rng(9))
    np.testing.assert_array_equal(short, long[:10])


def test_bursty_long_run_rate() -> None:
    rate, n = 1.0, 100_000
    spec = ArrivalsSpec(kind="bursty", rate_per_s=rate, peak_to_mean=5.0, burst_s=1.0)
    times = arrival_times(spec, n, np.random.default_rng(3))
    assert len(times) == n
    assert (np.diff(times) >= 0).all()
    observed = n / times[-1]
    # On/off with on ~ Exp(a = 1 s), off ~ Exp(b = 4 s), rate 5/s when on. The time on in [0, T]
    # has asymptotic variance 2 a^2 b^2 / (a + b)^3 T = 0.256 T, so Var N(T) ~ (5^2 * 0.256 + 1) T
    # = 7.4 T and the relative SE of the rate estimate is sqrt(7.4 / (rate^2 T)) with T ~ n;
    # allow 4 SE (~3.4%).
    rel_se = math.sqrt(7.4 / (rate**2 * n))
    assert abs(observed / rate - 1.0) < 4 * rel_se


def test_bursty_is_burstier_than_poisson() -> None:
    rng = np.random.default_rng(4)
    bursty = arrival_times(ArrivalsSpec(kind="bursty", rate_per_s=1.0, burst_s=10.0), 20_000, rng)
    poisson = arrival_times(ArrivalsSpec(kind="poisson", rate_per_s=1.0), 20_000, rng)

    def dispersion(times: np.ndarray) -> float:
        counts = np.bincount((times // 10.0).astype(int))
        return float(counts.var() / counts.mean())

    # Poisson counts have variance/mean 1 (SE ~ sqrt(2 / 2000 windows) ~ 0.032, allow ~4.7 SE);
    # the on/off process over 10 s windows has an index of dispersion far above 10
    assert abs(dispersion(poisson) - 1.0) < 0.15
    assert dispersion(bursty) > 10.0


def test_trace_keeps_gaps_and_scales() -> None:
    spec = ArrivalsSpec(kind="trace", file="t.csv", time_scale=0.5)
    spec.attach_trace(np.array([0.0, 1.0, 3.0, 6.0]))
    np.testing.assert_allclose(arrival_times(spec, 4, np.random.default_rng(0)), [0, 0.5, 1.5, 3])
    # beyond the trace it repeats end to end, one mean gap (2 s) after the last stamp
    repeated = arrival_times(spec, 7, np.random.default_rng(0))
    np.testing.assert_allclose(repeated, np.array([0, 1, 3, 6, 8, 9, 11]) * 0.5)
    unscaled = ArrivalsSpec(kind="trace", file="t.csv")
    unscaled.attach_trace(np.array([0.0, 1.0, 3.0, 6.0]))
    np.testing.assert_allclose(
        np.diff(arrival_times(unscaled, 4, np.random.default_rng(0))), [1.0, 2.0, 3.0]
    )


def test_trace_ignores_the_generator() -> None:
    spec = ArrivalsSpec(kind="trace", file="t.csv")
    spec.attach_trace(np.array([0.0, 2.5, 2.5, 7.0]))
    np.testing.assert_array_equal(
        arrival_times(spec, 4, np.random.default_rng(0)),
        arrival_times(spec, 4, np.random.default_rng(1)),
    )


def test_trace_from_a_file_of_timestamps(tmp_path: Path) -> None:
    stamps = ["2024-05-01 12:00:10", "2024-05-01 12:00:00", "2024-05-01 12:00:04"]
    (tmp_path / "trace.csv").write_text("TIMESTAMP\n" + "\n".join(stamps) + "\n")
    data = scenario_dict(arrivals={"kind": "trace", "file": "trace.csv", "time_scale": 2.0})
    scenario = scenario_from_dict(data, base_dir=tmp_path)
    times = arrival_times(scenario.arrivals, 3, np.random.default_rng(0))
    np.testing.assert_allclose(times, [0.0, 8.0, 20.0])  # sorted offsets 0, 4, 10 s, doubled


def test_trace_without_loaded_times_is_refused() -> None:
    with pytest.raises(ValueError, match="load the scenario"):
        arrival_times(ArrivalsSpec(kind="trace", file="t.csv"), 3, np.random.default_rng(0))
