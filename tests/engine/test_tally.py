"""Summaries without records (sim.engine.tally): the streaming pieces held to the whole-table
functions they stand in for: `PeakWindow` to `peak_window_sum`, `LimitWatch` to
`limit_that_binds`, chunked and windowed draw banks to one bank. Whole runs kept as summaries
against the same runs with every table are in tests/integration/test_tally.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
import sim.engine.choice
import sim.model.streams
from sim.analysis.metrics import peak_window_sum
from sim.engine.qualify import LimitWatch, limit_that_binds
from sim.engine.tally import PeakWindow
from sim.model.scenario import load_scenario
from sim.model.streams import CallDrawBank, Streams, WindowedDrawBank
from sim.plan import compile_scenario
from tests.helpers import REPO_ROOT, build, serving

SCENARIOS = REPO_ROOT / "scenarios"


def chunked(values: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    """`values` split at the sorted, de-duplicated `cuts`."""
    return np.split(values, sorted(set(cuts)))


# ---------------------------------------------------------------------------- the pieces


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 400), st.integers(0, 30), st.integers(0, 50)),
        min_size=0,
        max_size=60,
    ),
    st.lists(st.integers(0, 60), max_size=6),
)
def test_a_peak_window_fed_in_chunks_equals_one_pass(
    requests: list[tuple[int, int, int]], cuts: list[int]
) -> None:
    """Requests arrive in order; each has events at or after its arrival, so the arrival of a
    chunk's first request is a valid horizon for the chunks before it."""
    arrivals = np.sort(np.array([a for a, _, _ in requests], dtype=float))
    times = arrivals + np.array([d for _, d, _ in requests], dtype=float) * 3.7
    amounts = np.array([t for _, _, t in requests], dtype=float)
    window = PeakWindow(60.0)
    bounds = sorted({c for c in cuts if c < len(requests)})
    for lo, hi in zip([0, *bounds], [*bounds, len(requests)], strict=True):
        horizon = float(arrivals[hi]) if hi < len(requests) else math.inf
        window.add(times[lo:hi], amounts[lo:hi], horizon)
    assert window.peak() == peak_window_sum(times, amounts, 60.0)


def test_a_peak_window_keeps_the_events_a_later_window_still_holds() -> None:
    """An event 59.9 s before one of the next chunk is in its window, not forgotten."""
    window = PeakWindow(60.0)
    window.add(np.array([0.0]), np.array([10.0]), horizon=59.5)
    window.add(np.array([59.9]), np.array([10.0]))
    assert window.peak() == 20.0


def test_a_limit_watch_sees_a_slot_count_reached_across_chunks() -> None:
    """Two one-slot calls overlap only across the boundary: the carried call must be kept,
    even one ending exactly when the next starts (a tie counts as overlap)."""
    scenario = _limits_scenario(1, None, None)
    watch = LimitWatch(scenario.providers)
    one = np.zeros(1, dtype=np.int32)
    assert watch.add(one, np.array([0.0]), np.array([10.0]), np.array([5]), horizon=10.0) is None
    found = watch.add(one, np.array([10.0]), np.array([12.0]), np.array([5]), horizon=math.inf)
    assert found is not None
    assert "concurrency" in found


def test_a_peak_window_refuses_an_event_before_its_horizon() -> None:
    window = PeakWindow(60.0)
    window.add(np.array([10.0]), np.array([1.0]), horizon=20.0)
    with pytest.raises(ValueError, match="horizon"):
        window.add(np.array([19.0]), np.array([1.0]))


def _limits_scenario(concurrency: int, tpm: int | None, rpm: int | None) -> sim.Scenario:
    """One provider with these limits (the calls are given directly, not simulated)."""
    limits = {"concurrency": concurrency, "tpm": tpm, "rpm": rpm}
    provider = {"serves": {"big": serving()}, **{k: v for k, v in limits.items() if v}}
    return build(providers={"p": provider})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 20), st.integers(1, 40), st.integers(1, 900)),
        min_size=1,
        max_size=50,
    ),
    st.lists(st.integers(0, 50), max_size=6),
    st.integers(1, 8),
    st.sampled_from([None, 1500, 3000]),
    st.sampled_from([None, 6, 20]),
)
def test_a_limit_watch_fed_in_chunks_agrees_with_one_check(
    calls: list[tuple[int, int, int, int]],
    cuts: list[int],
    concurrency: int,
    tpm: int | None,
    rpm: int | None,
) -> None:
    scenario = _limits_scenario(concurrency, tpm, rpm)
    arrivals = np.sort(np.array([c[0] for c in calls], dtype=float))
    start = arrivals + np.array([c[1] for c in calls], dtype=float)
    end = start + np.array([c[2] for c in calls], dtype=float)
    tokens = np.array([c[3] for c in calls], dtype=np.int64)
    provider = np.zeros(len(calls), dtype=np.int32)
    whole = limit_that_binds(scenario.providers, provider, start, end, tokens)
    watch, found = LimitWatch(scenario.providers), None
    bounds = sorted({c for c in cuts if c < len(calls)})
    for lo, hi in zip([0, *bounds], [*bounds, len(calls)], strict=True):
        horizon = float(arrivals[hi]) if hi < len(calls) else math.inf
        found = watch.add(provider[lo:hi], start[lo:hi], end[lo:hi], tokens[lo:hi], horizon)
        if found:
            break
    found = found or watch.finish()
    assert (found is None) == (whole is None)
    if found is not None:  # the one named binds on its own (with several, either may be named)
        only = {
            "concurrency": (concurrency, None, None),
            "tpm": (10_000, tpm, None),
            "rpm": (10_000, None, rpm),
        }
        kind = next(k for k in only if f".{k} (" in found)
        alone = _limits_scenario(*only[kind])
        assert limit_that_binds(alone.providers, provider, start, end, tokens) is not None


def test_a_bank_in_chunks_draws_what_one_bank_draws() -> None:
    streams = Streams(11, "main").child("calls")
    whole = CallDrawBank(streams, 1000)
    parts = [
        CallDrawBank(streams, 300),
        CallDrawBank(streams, 450, 300),
        CallDrawBank(streams, 250, 750),
    ]
    for key in (("a", 0, 0), ("b", 2, 1)):
        assert np.array_equal(
            whole.uniforms(*key), np.concatenate([p.uniforms(*key) for p in parts])
        )
    assert np.array_equal(
        whole.uniforms("a", 0, 0, 3), np.concatenate([p.uniforms("a", 0, 0, 3) for p in parts])
    )
    lengths = [u for p in parts for u in p.length_uniforms("c", 0, 0)]
    assert whole.length_uniforms("c", 0, 0) == lengths
    assert whole.uniform(765, "jitter", 2) == parts[2].uniform(15, "jitter", 2)


def test_a_windowed_bank_draws_what_one_bank_draws() -> None:
    """Random access over 20 blocks, only 3 kept at a time: evicted blocks are drawn again,
    identically (draws, uniform blocks, per-request columns, answer lengths)."""
    scenario = load_scenario(SCENARIOS / "default.yaml")
    latencies = compile_scenario(scenario).latencies
    path = next(iter(latencies))
    streams = Streams(5, "main").child("calls")
    whole, windowed = CallDrawBank(streams, 20_000), WindowedDrawBank(streams, 20_000, 1000, 2)
    order = np.random.default_rng(0).integers(0, 20_000, 3000).tolist() + list(range(0, 20_000, 7))
    for i in order:
        a = whole.draws("s1", 0, 0, path, latencies[path], 100)
        b = windowed.draws("s1", 0, 0, path, latencies[path], 100)
        assert (a.ttft[i], a.generation[i], a.stall[i], a.outcome[i]) == (
            b.ttft[i],
            b.generation[i],
            b.stall[i],
            b.outcome[i],
        )
        assert whole.uniforms("s2", 1, 0)[i, 3] == windowed.uniforms("s2", 1, 0)[i, 3]
        assert whole.uniform(i, "spell", "s1", 0, 0, 0) == windowed.uniform(
            i, "spell", "s1", 0, 0, 0
        )
        assert whole.length_uniforms("s3", 0, 0)[i] == windowed.length_uniforms("s3", 0, 0)[i]
    # four accessors, each with the newest block and the two before it, plus one old block
    assert len(windowed._blocks) <= 4 * 3 + 1
