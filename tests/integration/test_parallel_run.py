"""A run's policies side by side (`tailsim run -e processes|dask`): the bytes of inline, progress
lines on a non-terminal stderr, errors and Ctrl-C as inline, and a summaries-only run's policies
drawing as if alone."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import sim
from sim.model import streams
from sim.model.errors import ScenarioError
from sim.model.scenario import load_scenario
from tests.helpers import assert_exit, cli, tailsim_command
from tests.study.test_policy_pool import POLICIES

#: run.json fields that say when and where a run ran (as the sweep's manifest has its own
#: finished_utc), not what it computed.
RUN_SPECIFIC = ("finished_utc", "wall_s", "executor", "workers")


@pytest.fixture
def contended(repo_root: Path) -> Path:
    """Four policies on one shared TPM quota (the event engine only), a pilot for `cut: p95`."""
    return repo_root / "scenarios" / "tpm-saturation.yaml"


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file in a results folder; run.json without its run-specific fields."""
    found = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "run.json":
            meta = {k: v for k, v in json.loads(data).items() if k not in RUN_SPECIFIC}
            data = json.dumps(meta, sort_keys=True).encode()
        found[str(path.relative_to(folder))] = hashlib.sha256(data).hexdigest()
    return found


@pytest.mark.slow
def test_processes_and_dask_give_the_bytes_of_inline(tmp_path: Path, contended: Path) -> None:
    """Every file (summary, breakdown, requests/calls/timeseries parquet, resolved scenario,
    run.json but its time and executor) is the inline run's, and each run says its progress."""
    outs, stderr = {}, {}
    for executor in ("inline", "processes", "dask"):
        out = tmp_path / executor
        args = ["run", contended, "-n", "300", "--out", out, "--no-plot", "-e", executor]
        done = cli(*args, *(["-w", "2"] if executor != "inline" else []))
        assert_exit(done, 0)
        outs[executor], stderr[executor] = digests(out), done.stderr
    assert {"summary.csv", "breakdown.csv", "requests.parquet", "calls.parquet",
            "timeseries.parquet", "run.json"} <= set(outs["inline"])  # fmt: skip
    assert outs["processes"] == outs["inline"]
    assert outs["dask"] == outs["inline"]
    meta = json.loads((tmp_path / "processes" / "run.json").read_text())
    assert (meta["executor"], meta["workers"]) == ("processes", 2)
    assert list(meta["wall_s"]) == ["pilot", *POLICIES]
    for executor, text in stderr.items():
        for policy in POLICIES:  # 300 requests: below the first 1,000 a tick reports, one line
            assert f"run: {policy} 100% (300 of 300 requests, " in text, (executor, text)


@pytest.mark.parametrize("records", ["none", "requests"])
def test_summaries_only_runs_are_the_same_on_processes(contended: Path, records: str) -> None:
    """The tallied runs (what a big run keeps by default): same summary, breakdown, requests
    and latencies from worker processes, and every policy's progress reaches the run's size."""
    spec = load_scenario(contended)
    inline = sim.run(spec, requests=400, records=records)
    seen: dict[str, int] = {}
    parallel = sim.run(
        spec,
        requests=400,
        records=records,
        executor="processes",
        workers=2,
        progress=lambda name, k: seen.__setitem__(name, seen.get(name, 0) + k),
    )
    pd.testing.assert_frame_equal(parallel.summary, inline.summary, check_exact=True)
    pd.testing.assert_frame_equal(parallel.breakdown, inline.breakdown, check_exact=True)
    pd.testing.assert_frame_equal(parallel.requests, inline.requests, check_exact=True)
    assert list(parallel.latency) == list(POLICIES)
    for policy in POLICIES:
        assert parallel.latency[policy].tobytes() == inline.latency[policy].tobytes()
    assert seen == dict.fromkeys(POLICIES, 400)
    assert (parallel.executor, parallel.workers) == ("processes", 2)


def test_an_error_in_a_worker_is_the_inline_error(tmp_path: Path, contended: Path) -> None:
    """`--engine vectorized` fails inside the worker that runs `cut`: exit 2 and the message of
    the inline run, no traceback, nothing written."""
    messages = []
    for executor in ("inline", "processes"):
        out = tmp_path / executor
        args = ["run", contended, "-n", "300", "--engine", "vectorized", "-q", "--out", out]
        done = cli(*args, "-e", executor, *(["-w", "2"] if executor != "inline" else []))
        assert_exit(done, 2)
        assert not out.exists()
        messages.append(done.stderr)
    assert "the vectorized engine cannot run policy 'cut'" in messages[0]
    assert messages[1] == messages[0]


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_and_exits_130(tmp_path: Path, contended: Path) -> None:
    """SIGINT to `tailsim run -e processes` alone (not its workers), at its first progress line
    (a tenth of the way): the workers are told to stop, so no policy reaches 100%; exit 130,
    nothing written. Without the halt both would run to the end and say so."""
    out = tmp_path / "out"
    command = [*tailsim_command(), "run", str(contended), "-n", "60000", "-p", "race,cut",
               "--records", "none", "-e", "processes", "-w", "2", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # the first progress line: the workers are well into the run
        said.append(line)
        if line.startswith("run: "):
            break
    proc.send_signal(signal.SIGINT)
    try:
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, [*said, rest]
    assert "interrupted" in rest
    assert "Traceback" not in rest
    assert " 100% " not in "".join(said) + rest
    assert not out.exists()


def test_quiet_prints_no_progress(tmp_path: Path, contended: Path) -> None:
    out = tmp_path / "q"
    done = cli("run", contended, "-n", "200", "-p", "race", "-q", "--no-plot", "--out", out)
    assert_exit(done, 0)
    assert "run: " not in done.stderr


def test_bad_executor_options_exit_2(tmp_path: Path, contended: Path) -> None:
    done = cli("run", contended, "-n", "50", "--scheduler", "tcp://127.0.0.1:1", "--out",
               tmp_path / "x")  # fmt: skip
    assert_exit(done, 2)
    assert "--scheduler: needs --executor dask" in done.stderr
    with pytest.raises(ScenarioError, match="unknown executor 'threads'"):
        sim.run(load_scenario(contended), requests=10, executor="threads")


def test_each_policy_of_a_summaries_only_run_draws_as_if_alone(
    contended: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline, a summaries-only run's event-engine policies each get a windowed draw bank of
    their own: the blocks drawn for `cut` then `race` are those of `cut` alone plus `race`
    alone. (One bank shared, `race`'s first blocks counted as stale behind `cut`'s last and
    were drawn again on every use: 20x slower at 60,000 requests, same numbers.)"""
    monkeypatch.setattr(streams, "WINDOW_ROWS", 64)  # 12 blocks for 800 requests, 4 kept
    drawn = [0]
    original = streams.WindowedDrawBank._block

    def counted(bank: streams.WindowedDrawBank, key: object, block: int, make: object) -> object:
        drawn[0] += (key, block) not in bank._blocks
        return original(bank, key, block, make)  # type: ignore[arg-type]

    monkeypatch.setattr(streams.WindowedDrawBank, "_block", counted)
    spec = load_scenario(contended)
    alone = []
    for policies in (["cut"], ["race"], ["cut", "race"]):
        drawn[0] = 0
        sim.run(spec, requests=800, policies=policies, records="none", engine="des")
        alone.append(drawn[0])
    assert alone[0] > 0
    assert alone[2] == alone[0] + alone[1]
