"""Summaries without records (`records: none | requests`): the same numbers in bounded memory.

The streaming pieces are held to the whole-table functions they stand in for: `PeakWindow` to
`peak_window_sum`, `LimitWatch` to `limit_that_binds`, chunked draw banks to one bank, and a
whole run kept as summaries (in small chunks, so many chunk boundaries are crossed) to the same
run with every table, on scenarios that exercise each engine and feature. Floats may differ only
by summation order: rtol 1e-12.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
import sim.engine.choice
import sim.model.streams
from sim.analysis.capacity import ALL, NONE, REQUESTS, default_records
from sim.analysis.metrics import peak_window_sum
from sim.engine.qualify import LimitWatch, limit_that_binds
from sim.engine.simulation import serving_latencies
from sim.engine.tally import PeakWindow, SettledRuns
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario, with_overrides
from sim.model.streams import CallDrawBank, Streams, WindowedDrawBank
from tests.helpers import REPO_ROOT, assert_exit, build, cli, serving

SCENARIOS = REPO_ROOT / "scenarios"
RTOL = 1e-12  # the same sums in another order


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
    watch = LimitWatch(scenario)
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
    whole = limit_that_binds(scenario, provider, start, end, tokens)
    watch, found = LimitWatch(scenario), None
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
        assert limit_that_binds(alone, provider, start, end, tokens) is not None


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


# ---------------------------------------------------------------------------- whole runs


def _assert_same_tables(full: pd.DataFrame, tallied: pd.DataFrame) -> None:
    assert list(full.columns) == list(tallied.columns)
    pd.testing.assert_frame_equal(
        full.reset_index(drop=True),
        tallied.reset_index(drop=True),
        check_dtype=False,
        rtol=RTOL,
        atol=0,
    )


#: (scenario file, requests, overrides): each engine, quotas, SDK retries, re-sends, tool steps,
#: warm-up. Event-engine runs are over 2000 requests, so settled runs are flushed while they run
#: (the engine's progress hook, where flushing happens, comes every 1000 arrivals).
RUNS = [
    ("default.yaml", 1500, {}),
    ("default.yaml", 1500, {"warmup_s": 600.0}),
    ("tpm-saturation.yaml", 2500, {"providers.api.sdk.retries": 2}),
    ("tpm-saturation.yaml", 2500, {"warmup_s": 300.0}),
    ("retry-storm.yaml", 2500, {}),
    ("tool-resend.yaml", 400, {}),
    ("draft-race.yaml", 2200, {}),
    ("deadline-propagation.yaml", 2200, {}),
]


@pytest.mark.parametrize(("name", "requests", "overrides"), RUNS)
def test_summaries_only_give_the_numbers_of_every_table(
    name: str, requests: int, overrides: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = with_overrides(load_scenario(SCENARIOS / name), overrides)
    full = sim.run(scenario, requests=requests, records=ALL)
    monkeypatch.setattr(sim.engine.choice, "CHUNK_REQUESTS", 170)  # many chunk boundaries
    monkeypatch.setattr(SettledRuns, "EVERY_CALLS", 300)  # flush event-engine runs often
    monkeypatch.setattr(sim.model.streams, "WINDOW_ROWS", 64)  # and draw from many small blocks
    flushed: list[int] = []
    check = SettledRuns.check

    def counting(self: SettledRuns) -> None:
        before = len(self.sim.runs)
        check(self)
        flushed.append(before - len(self.sim.runs))

    monkeypatch.setattr(SettledRuns, "check", counting)
    tallied = sim.run(scenario, requests=requests, records=NONE)
    assert tallied.engines == full.engines
    if "des" in full.engines.values() and name != "tool-resend.yaml":
        assert sum(flushed) > 0  # runs really left the simulation's records while it ran
    _assert_same_tables(full.summary, tallied.summary)
    _assert_same_tables(full.breakdown, tallied.breakdown)
    assert tallied.requests.empty
    assert tallied.calls.empty
    counted = full.summary.set_index("policy")["runs"]
    for policy, latency in tallied.latency.items():
        assert len(latency) == counted[policy]


def test_records_requests_keeps_the_requests_table_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = load_scenario(SCENARIOS / "default.yaml")
    full = sim.run(scenario, requests=900, policies=["wait", "race"], records=ALL)
    monkeypatch.setattr(sim.engine.choice, "CHUNK_REQUESTS", 250)
    kept = sim.run(scenario, requests=900, policies=["wait", "race"], records=REQUESTS)
    pd.testing.assert_frame_equal(full.requests, kept.requests)
    assert kept.calls.empty
    _assert_same_tables(full.summary, kept.summary)


def test_the_vectorized_engine_in_chunks_still_refuses_a_limit_that_binds() -> None:
    """A slot count reached only across a chunk boundary is still seen (engine: auto falls
    back to the event engine, engine: vectorized refuses)."""
    scenario = with_overrides(
        load_scenario(SCENARIOS / "default.yaml"), {"providers.direct.concurrency": 3}
    )
    result = sim.run(scenario, requests=300, policies=["wait"], records=NONE)
    assert result.engines == {"wait": "des"}
    assert "concurrency" in result.engine_notes["wait"]
    with pytest.raises(ScenarioError, match="concurrency"):
        sim.run(scenario, requests=300, policies=["wait"], records=NONE, engine="vectorized")


def test_a_big_run_keeps_summaries_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = load_scenario(SCENARIOS / "default.yaml")
    assert default_records(scenario, 1000, ["wait"]) == ALL
    assert default_records(scenario, 1_000_000, list(scenario.policies)) == NONE
    monkeypatch.setattr(sim.analysis.capacity, "AUTO_ALL_BYTES", 1)
    assert sim.run(scenario, requests=200, policies=["wait"]).records == NONE


def test_an_unknown_records_value_is_refused() -> None:
    with pytest.raises(ScenarioError, match="records"):
        sim.run(load_scenario(SCENARIOS / "default.yaml"), requests=10, records="some")


def test_the_cli_writes_summaries_only_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    result = cli("run", "--requests", "400", "--records", "none", "--out", out, "-q")
    assert_exit(result, 0)
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "breakdown.csv",
        "figures",
        "run.json",
        "scenario.resolved.yaml",
        "summary.csv",
    ]
    assert json.loads((out / "run.json").read_text())["records"] == "none"
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["requests"]) == [400] * 5
    refused = cli("plot", out)
    assert_exit(refused, 2)
    assert "--records none" in refused.stderr
    # without --records, a run too big for every table keeps summaries and says why
    monkeypatch.setattr(sim.analysis.capacity, "AUTO_ALL_BYTES", 1)
    noticed = cli("run", "--requests", "300", "-p", "wait", "--out", tmp_path / "auto", "-q")
    assert_exit(noticed, 0)
    assert "keeps summaries only" in noticed.stderr
    assert not (tmp_path / "auto" / "calls.parquet").exists()


@pytest.mark.parametrize("plot", [True, False], ids=["figure", "no-plot"])
def test_the_summaries_only_notice_lists_exactly_the_files_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plot: bool
) -> None:
    """The automatic switch names the files the run then writes: no figure with --no-plot."""
    monkeypatch.setattr(sim.analysis.capacity, "AUTO_ALL_BYTES", 1)
    out = tmp_path / "auto"
    flags = [] if plot else ["--no-plot"]
    result = cli("run", "--requests", "60", "-p", "wait", "--out", out, "-q", *flags)
    assert_exit(result, 0)
    listed = re.search(r"it writes (.+?), no requests/calls", " ".join(result.stderr.split()))
    assert listed is not None, result.stderr
    named = sorted(re.split(r", | and ", listed.group(1)))
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert named == written
    assert ("figures/policies.png" in written) == plot


def test_explain_reads_a_summaries_only_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert_exit(cli("run", "--requests", "300", "-p", "wait", "--records", "none", "--out", out), 0)
    explained = cli("explain", out)
    assert_exit(explained, 0)
    assert "wait" in explained.stdout
    assert "failed runs" in explained.stdout


def test_each_policy_of_a_summaries_only_run_draws_its_blocks_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each policy of a summaries-only run gets a windowed bank of its own: a policy draws the
    blocks it draws alone. (With one bank shared, every later policy took its blocks for a late
    re-send's and drew one again at almost every use: 9x slower at 30,000 requests.)"""
    monkeypatch.setattr(sim.model.streams, "WINDOW_ROWS", 64)  # 16 blocks, 4 kept
    scenario = load_scenario(SCENARIOS / "tpm-saturation.yaml")  # the event engine: quotas
    block = WindowedDrawBank._block
    drawn = [0]

    def counting(bank: WindowedDrawBank, key: Any, index: int, make: Any) -> Any:
        drawn[0] += (key, index) not in bank._blocks
        return block(bank, key, index, make)

    monkeypatch.setattr(WindowedDrawBank, "_block", counting)
    alone = []
    for policy in ("cut", "race"):
        drawn[0] = 0
        sim.run(scenario, requests=1000, policies=[policy], records=NONE)
        alone.append(drawn[0])
    drawn[0] = 0
    both = sim.run(scenario, requests=1000, policies=["cut", "race"], records=NONE)
    assert set(both.engines.values()) == {"des"}
    assert min(alone) > 16  # every block, and more: the windows really turn over
    assert drawn[0] == sum(alone)


def test_a_windowed_bank_draws_what_one_bank_draws() -> None:
    """Random access over 20 blocks, only 3 kept at a time: evicted blocks are drawn again,
    identically (draws, uniform blocks, per-request columns, answer lengths)."""
    scenario = load_scenario(SCENARIOS / "default.yaml")
    latencies = serving_latencies(scenario)
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


def test_chunks_of_the_real_size_give_the_numbers_of_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks big enough for the vectorized engine's sparse draws (a call slot few requests
    need, like wait's third attempt, is drawn row by row): each chunk must draw its own rows."""
    scenario = load_scenario(SCENARIOS / "default.yaml")
    full = sim.run(scenario, requests=24_000, policies=["wait"], records=ALL)
    monkeypatch.setattr(sim.engine.choice, "CHUNK_REQUESTS", 8_000)
    tallied = sim.run(scenario, requests=24_000, policies=["wait"], records=NONE)
    _assert_same_tables(full.summary, tallied.summary)
    _assert_same_tables(full.breakdown, tallied.breakdown)
