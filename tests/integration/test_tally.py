"""Summaries without records (`records: none | requests`) on whole runs: the same numbers in
bounded memory.

A whole run kept as summaries (in small chunks, so many chunk boundaries are crossed) is held to
the same run with every table, on scenarios that exercise each engine and feature; floats may
differ only by summation order: rtol 1e-12. Then the defaults, the refusals, and what the CLI
writes and says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sim
import sim.engine.choice
import sim.model.streams
from sim.analysis.capacity import ALL, NONE, REQUESTS, default_records
from sim.engine.tally import SettledRuns
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario, with_overrides
from sim.model.streams import WindowedDrawBank
from sim.plan import compile_scenario
from tests.helpers import REPO_ROOT, assert_exit, cli

SCENARIOS = REPO_ROOT / "scenarios"
RTOL = 1e-12  # the same sums in another order


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


SLOW = pytest.mark.slow
#: (scenario file, requests, overrides): each engine, quotas, SDK retries, re-sends, tool steps,
#: warm-up, streams. Event-engine runs are over 2000 requests, so settled runs are flushed while
#: they run (the engine's progress hook, where flushing happens, comes every 1000 arrivals).
#: The three slowest are `slow`: the quick run keeps the default scenario (both its runs), tool
#: steps and re-sends, and draft-race; tests/engine/test_tally.py holds the pieces that
#: stand in for binding quotas and peaks (LimitWatch, PeakWindow) to their whole-table functions.
RUNS = [
    ("default.yaml", 1500, {}),
    ("default.yaml", 1500, {"warmup_s": 600.0}),
    pytest.param("tpm-saturation.yaml", 2500, {"providers.api.sdk.retries": 2}, marks=SLOW),
    pytest.param("tpm-saturation.yaml", 2500, {"warmup_s": 300.0}, marks=SLOW),
    pytest.param("retry-storm.yaml", 2500, {}, marks=SLOW),
    ("tool-resend.yaml", 400, {}),
    ("draft-race.yaml", 2200, {}),
    pytest.param("deadline-propagation.yaml", 2200, {}, marks=SLOW),
    # streams: the named step's first token (user_ttft_*) and the stream cuts' counts
    ("streaming.yaml", 2200, {"warmup_s": 100.0}),
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
    assert default_records(compile_scenario(scenario), 1000, ["wait"]) == ALL
    assert default_records(compile_scenario(scenario), 1_000_000, list(scenario.policies)) == NONE
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
